"""The egress gate of the whole-process sandbox: an allowlist, a forwarder and a proxy.

Inside the envelope the network namespace has no route out; its only way to the world is
a bridge (:data:`BRIDGE_SOURCE`, stdlib Python run as the envelope's first process) that
listens on loopback ports inside and carries each connection over a unix socket in the
session's runtime folder to the :class:`EgressGate` that seamline runs outside:

- a *forward* socket per loopback model endpoint (``base_url`` on 127.0.0.1 in tests, a
  local gateway in production): inside ``127.0.0.1:PORT`` reaches outside ``HOST:PORT``,
  whatever the program sends; the target is fixed outside, the inside cannot choose it;
- the *proxy* socket, an HTTP proxy (``CONNECT host:port`` and absolute-URI plain HTTP)
  that lets through only the hosts of the :class:`AllowList` and answers anything else
  ``403`` and reports it (:attr:`EgressGate.refused`). A plain-HTTP request that carries
  one of :attr:`EgressGate.refuse_carrying` (the model gateway's placeholder credentials),
  in its head or anywhere after it on the connection, is refused or cut before that piece
  goes out, whatever its host, and reported too.

>>> allow = AllowList.parse(["api.anthropic.com", "example.org:8443"])
>>> allow.permits("API.anthropic.com", 443), allow.permits("example.org", 443)
(True, False)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

from seamline.errors import InvalidRequest

__all__ = [
    "BRIDGE_SOURCE",
    "AllowList",
    "EgressGate",
    "Refusal",
    "endpoint_of",
    "is_loopback",
    "loopback_to_unix",
    "open_exposed_socket",
]

_HEAD_LIMIT: Final = 64 * 1024
_CHUNK: Final = 1 << 16
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

# The bridge, run inside by /usr/bin/python3 as the envelope's first process. argv[1] is a
# JSON object: {"listen": [[port, socket path], ...], "expose": [[port, socket path], ...],
# "argv": [...]}. "listen": an inside loopback port carried to a unix socket served outside;
# "expose": a unix socket made here (in the runtime folder's expose/ subfolder, the only part
# of it bound read-write) carried to a port inside,
# so seamline reaches a server the program runs (opencode serve). It binds everything before
# it starts the program, ignores SIGINT (the program takes it and ends the turn the way it
# does outside) and exits with the program's status.
BRIDGE_SOURCE: Final = r"""
import json, os, signal, socket, subprocess, sys, threading
cfg = json.loads(sys.argv[1])
def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def handle(conn, path):
    if isinstance(path, int):
        out = socket.socket(socket.AF_INET, socket.SOCK_STREAM); where = ("127.0.0.1", path)
    else:
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); where = path
    try:
        out.connect(where)
    except OSError:
        conn.close(); out.close(); return
    back = threading.Thread(target=pipe, args=(out, conn), daemon=True)
    back.start(); pipe(conn, out); back.join(); conn.close(); out.close()
def serve(listener, path):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn, path), daemon=True).start()
for port, path in cfg["listen"]:
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
for port, path in cfg.get("expose", []):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path); os.chmod(path, 0o600); listener.listen(64)
    threading.Thread(target=serve, args=(listener, port), daemon=True).start()
signal.signal(signal.SIGINT, signal.SIG_IGN)
filt = bytes.fromhex(cfg.get("seccomp", ""))
if filt:
    # The program (not the bridge, which needs its unix socket) gets the unix-socket filter.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buf = ctypes.create_string_buffer(filt, len(filt))
    prog = Fprog(len(filt) // 8, ctypes.cast(buf, ctypes.c_void_p))
def child():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if filt and (libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0):
        os._exit(126)
try:
    proc = subprocess.Popen(cfg["argv"], preexec_fn=child)
except OSError as exc:
    sys.stderr.write("seamline envelope: cannot start %s: %s\n" % (cfg["argv"][0], exc)); sys.exit(127)
code = proc.wait()
sys.exit(128 - code if code < 0 else code)
"""


def is_loopback(host: str) -> bool:
    return host.lower() in _LOOPBACK or host.startswith("127.")


def endpoint_of(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http(s) URL, the scheme's port when none is given."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"not an http(s) URL: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidRequest(f"bad port in {url!r}") from None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


@dataclass(frozen=True, slots=True)
class AllowList:
    """Hosts the sandbox may reach: ``host`` (any port) or ``host:port``; case does not matter."""

    entries: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def parse(cls, items: Iterable[str]) -> AllowList:
        entries: list[tuple[str, int | None]] = []
        for raw in items:
            item = raw.strip()
            if not item:
                continue
            host, port = _split_host_port(item)
            if not host or any(c in host for c in "/ @?#"):
                raise InvalidRequest(f"network.allow: {raw!r} is not host[:port]")
            entries.append((host.lower(), port))
        return cls(tuple(dict.fromkeys(entries)))

    def plus(self, other: AllowList) -> AllowList:
        return AllowList(tuple(dict.fromkeys(self.entries + other.entries)))

    def permits(self, host: str, port: int) -> bool:
        name = host.lower().strip("[]")
        return any(h.strip("[]") == name and (p is None or p == port) for h, p in self.entries)

    def render(self) -> list[str]:
        return [h if p is None else f"{h}:{p}" for h, p in self.entries]


def _split_host_port(item: str) -> tuple[str, int | None]:
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif item.count(":") == 1:
        host, _, port_text = item.partition(":")
    else:
        host, port_text = item, ""
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidRequest(f"network.allow: bad port in {item!r}")
    return host, int(port_text)


@dataclass(frozen=True, slots=True)
class Refusal:
    """One connection the proxy refused."""

    host: str
    port: int
    method: str
    reason: Literal["not_allowed", "placeholder"] = "not_allowed"
    """``placeholder``: the request carried a credential that is worth something only at
    seamline's model gateway (see :attr:`EgressGate.refuse_carrying`)."""


@dataclass
class EgressGate:
    """The outside half: serves the forward and proxy sockets in ``folder``."""

    folder: Path
    allow: AllowList
    forwards: tuple[tuple[str, int], ...] = ()
    refuse_carrying: tuple[bytes, ...] = ()
    """What a plain-HTTP request's head may not carry (the model gateway's placeholder
    credentials): such a request is refused whatever its host, and reported. A ``CONNECT``
    tunnel carries TLS, which the proxy cannot read; a placeholder sent there is worth
    nothing at any host but the gateway."""
    on_refusal: Callable[[Refusal], None] | None = None
    refused: list[Refusal] = field(default_factory=list)
    _servers: list[asyncio.Server] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def proxy_socket(self) -> Path:
        return self.folder / "egress-proxy.sock"

    def forward_socket(self, index: int) -> Path:
        return self.folder / f"egress-f{index}.sock"

    async def start(self) -> None:
        for index, (host, port) in enumerate(self.forwards):
            path = self.forward_socket(index)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            server = await asyncio.start_unix_server(self._forwarder(host, port), path=str(path))
            self._servers.append(server)
        with contextlib.suppress(FileNotFoundError):
            self.proxy_socket.unlink()
        self._servers.append(await asyncio.start_unix_server(self._proxy, path=str(self.proxy_socket)))
        for path in [self.proxy_socket, *(self.forward_socket(i) for i in range(len(self.forwards)))]:
            os.chmod(path, 0o600)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        for path in [self.proxy_socket, *(self.forward_socket(i) for i in range(len(self.forwards)))]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _forwarder(
        self, host: str, port: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._track()
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                writer.close()
                return
            await _splice(reader, writer, up_reader, up_writer)

        return forward

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.close()
            return
        if len(head) > _HEAD_LIMIT:
            await _answer(writer, 431, "request head too large")
            return
        request_line, _, rest = head.partition(b"\r\n")
        parts = request_line.decode("latin-1").split(" ")
        if len(parts) != 3:
            await _answer(writer, 400, "not an HTTP proxy request")
            return
        method, target, version = parts
        try:
            if method.upper() == "CONNECT":
                host, port = _split_host_port(target)
                port = port or 443
                tail = b""
            else:
                host, port = endpoint_of(target)
                split = urlsplit(target)
                origin = (split.path or "/") + (f"?{split.query}" if split.query else "")
                kept = [h for h in rest.split(b"\r\n") if not h.lower().startswith(b"proxy-")]
                tail = f"{method} {origin} {version}\r\n".encode("latin-1") + b"\r\n".join(kept)
        except InvalidRequest:
            await _answer(writer, 400, "bad proxy target")
            return
        carried = bool(tail) and any(marker in head for marker in self.refuse_carrying)
        if carried or not self.allow.permits(host, port):
            refusal = Refusal(
                host=host, port=port, method=method.upper(), reason="placeholder" if carried else "not_allowed"
            )
            self.refused.append(refusal)
            if self.on_refusal is not None:
                self.on_refusal(refusal)
            why = (
                "the request carries a credential that only seamline's model gateway takes"
                if carried
                else f"{host}:{port} is not on the sandbox's allowlist"
            )
            await _answer(writer, 403, f"seamline egress: {why}")
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            await _answer(writer, 502, f"seamline egress: cannot reach {host}:{port}: {exc.strerror or exc}")
            return
        watch: _Markers | None = None
        if tail:
            up_writer.write(tail)
            if self.refuse_carrying:
                # What follows the head (a body, a second request on the connection) is
                # plain too: it is read on the way, and the connection cut where it carries
                # a marker, before that piece goes out.
                watch = _Markers(self.refuse_carrying, lambda: self._carried(host, port, method))
        else:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await _splice(reader, writer, up_reader, up_writer, watch=watch)

    def _carried(self, host: str, port: int, method: str) -> None:
        refusal = Refusal(host=host, port=port, method=method.upper(), reason="placeholder")
        self.refused.append(refusal)
        if self.on_refusal is not None:
            self.on_refusal(refusal)


async def loopback_to_unix(path: Path) -> tuple[asyncio.Server, int]:
    """A server on 127.0.0.1 (a free port) that carries each connection to the unix socket
    ``path``: how seamline reaches a server the program runs inside the envelope. ``path``
    lies in a folder the program can write, so each connection goes only to a socket bound
    at that very path (see :func:`open_exposed_socket`); anything else closes it."""

    async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await open_exposed_socket(path)
        except OSError:
            writer.close()
            return
        await _splice(reader, writer, up_reader, up_writer)

    server = await asyncio.start_server(carry, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def open_exposed_socket(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the unix socket the program made at ``path``, in a folder it can
    write. Only a socket: a link there (to a host socket seamline can reach and the program
    cannot) or any other file is refused (``lstat``); and since the name can be swapped
    between that check and ``connect``, the peer must be bound at exactly ``path``
    (``getpeername``), which a host socket reached through a link is not. Raises
    :class:`OSError` (``EPERM``) when refused."""
    found = os.lstat(path)
    if not stat.S_ISSOCK(found.st_mode):
        raise PermissionError(errno.EPERM, "not a socket; refused (links are never followed)", str(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, str(path))
        if sock.getpeername() != str(path):
            raise PermissionError(errno.EPERM, "the socket is not the one made at this path; refused", str(path))
        return await asyncio.open_unix_connection(sock=sock)
    except BaseException:
        sock.close()
        raise


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


class _Markers:
    """Finds any of ``markers`` in a stream read piece by piece (one split between two
    pieces too), and says so once."""

    def __init__(self, markers: tuple[bytes, ...], on_found: Callable[[], None]) -> None:
        self._markers = markers
        self._keep = max(len(m) for m in markers) - 1
        self._tail = b""
        self._on_found = on_found

    def found_in(self, data: bytes) -> bool:
        seen = self._tail + data
        self._tail = seen[-self._keep :] if self._keep else b""
        if any(m in seen for m in self._markers):
            self._on_found()
            return True
        return False


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    watch: _Markers | None = None,
) -> None:
    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, outbound: bool = False) -> None:
        try:
            while data := await src.read(_CHUNK):
                if outbound and watch is not None and watch.found_in(data):
                    for w in (writer, up_writer):
                        w.transport.abort()
                    return
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                if dst.can_write_eof():
                    dst.write_eof()

    try:
        await asyncio.gather(copy(reader, up_writer, outbound=True), copy(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            w.close()
