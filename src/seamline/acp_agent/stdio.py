"""``seamline acp`` on stdio: the agent's JSON-RPC connection over stdin and stdout.

stdout belongs to the protocol: before serving, the real stdout is kept for the
connection and file descriptor 1 is pointed at stderr, so a stray ``print`` (ours, a
library's, a tool's child process) lands on stderr instead of corrupting the wire.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import threading
from typing import BinaryIO, cast

from seamline.acp_agent.agent import AcpAgentSettings, SeamlineAcpAgent
from seamline.acp_agent.connection import DEFAULT_MAX_LINE, AgentConnection

__all__ = ["finish_copies", "pipe_streams", "serve_stdio"]


class _WriteProtocol(asyncio.Protocol):
    """Flow control for the stdout pipe: ``drain`` waits while the client does not read."""

    def __init__(self) -> None:
        self._paused = False
        self._waiters: list[asyncio.Future[None]] = []

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        self.resume_writing()

    async def _drain_helper(self) -> None:
        if self._paused:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter


class _PipeWriter(asyncio.StreamWriter):
    """The writing end of a pair of pipes; closing it closes the reading end too, as
    closing a socket's writer does (a read pipe left open warns "unclosed transport"
    whenever the garbage collector gets to it)."""

    def __init__(
        self,
        transport: asyncio.WriteTransport,
        protocol: _WriteProtocol,
        loop: asyncio.AbstractEventLoop,
        read_transport: asyncio.ReadTransport,
    ) -> None:
        super().__init__(transport, protocol, None, loop)
        self._read_transport = read_transport

    def close(self) -> None:
        self._read_transport.close()
        super().close()


async def pipe_streams(
    read_from: BinaryIO, write_to: BinaryIO, *, limit: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams over two pipes (the writer's ``drain`` waits for the reader).

    ``writer.close()`` closes both pipes."""
    loop = asyncio.get_running_loop()
    read_from, write_to = _piped(read_from, reading=True), _piped(write_to, reading=False)
    reader = asyncio.StreamReader(limit=limit)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_from)
    protocol = _WriteProtocol()
    try:
        transport, _ = await loop.connect_write_pipe(lambda: protocol, write_to)
    except BaseException:
        read_transport.close()
        raise
    return reader, _PipeWriter(transport, protocol, loop, read_transport)


_COPIERS: list[threading.Thread] = []


def _piped(stream: BinaryIO, *, reading: bool) -> BinaryIO:
    """``stream`` as asyncio's pipe transports accept it: a regular file (``seamline acp >
    out.jsonl``, ``< requests.jsonl``) or a device that cannot be polled (``/dev/null``) is
    bridged through a pipe by a thread that copies (see :func:`finish_copies`)."""
    try:
        mode_bits = os.fstat(stream.fileno()).st_mode
        # epoll takes pipes, sockets and terminals; a regular file or a device such as
        # /dev/null (`seamline acp < /dev/null`) it refuses (EPERM): those get the copier.
        unpollable = stat.S_ISREG(mode_bits) or (stat.S_ISCHR(mode_bits) and not os.isatty(stream.fileno()))
    except (OSError, ValueError):
        return stream
    if not unpollable:
        return stream
    read_end, write_end = os.pipe()
    if reading:
        source, target, kept, mode = os.dup(stream.fileno()), write_end, read_end, "rb"
    else:
        source, target, kept, mode = read_end, os.dup(stream.fileno()), write_end, "wb"

    def copy() -> None:
        try:
            while chunk := os.read(source, 65536):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(target, view) :]
        except OSError:
            pass  # the other side went away: nothing more to copy
        finally:
            os.close(source)
            os.close(target)

    copier = threading.Thread(target=copy, name="seamline-acp-file-copy", daemon=True)
    copier.start()
    _COPIERS.append(copier)
    return cast(BinaryIO, os.fdopen(kept, mode, buffering=0))


def finish_copies(timeout: float = 10.0) -> None:
    """Wait (bounded) until what was written for a regular-file stdout is all in the file."""
    for copier in _COPIERS:
        copier.join(timeout)
    _COPIERS.clear()


async def serve_stdio(settings: AcpAgentSettings, *, max_line: int = DEFAULT_MAX_LINE) -> None:
    """Serve one client on stdin/stdout until it closes stdin; then close every session."""
    sys.stdout.flush()
    wire_fd = os.dup(1)
    os.dup2(2, 1)  # stray writes to stdout now reach stderr
    reader, writer = await pipe_streams(sys.stdin.buffer, os.fdopen(wire_fd, "wb", buffering=0), limit=max_line + 1)
    agent = SeamlineAcpAgent(settings)
    connection = AgentConnection(
        reader, writer, on_request=agent.handle, on_notification=agent.notified, max_line=max_line
    )
    agent.connection = connection
    try:
        await connection.serve()
        # The client closed stdin: running turns are cancelled, what it asked is still
        # answered (it may read stdout to the end), then every session is closed.
        await agent.shut_down()
        await connection.wait_handlers(timeout=settings.cancel_grace + 10)
    finally:
        await agent.close_all()
        await connection.cancel_handlers()
        writer.close()
