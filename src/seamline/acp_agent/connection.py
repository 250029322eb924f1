"""JSON-RPC 2.0 on the agent's side of stdio: one message per line, both directions.

The client (an editor) sends requests and notifications; :class:`AgentConnection` runs
each request's handler as its own task (a ``session/cancel`` must get through while a
``session/prompt`` is still running), answers with its result or a JSON-RPC error, and
sends requests of its own to the client (``session/request_permission``) whose answers
settle by id. The wire code (framing, encoding, error codes) is the one
:mod:`seamline.transport.jsonrpc` uses for the client side.

Bad input gets an answer and the connection goes on: a line that is not JSON is a parse
error (-32700), a JSON value that is not a JSON-RPC 2.0 message an invalid request
(-32600), and a line longer than ``max_line`` bytes is dropped whole with an invalid
request error. Writes wait for the client to read (``drain``): a client that never reads
stops the agent instead of growing its memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec

from seamline.errors import SeamlineError, TimeoutFailure, TransportFailure
from seamline.transport.jsonrpc import INTERNAL_ERROR, JsonRpcError, encode_message

__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "AgentConnection", "Handler"]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
DEFAULT_MAX_LINE: Final = 16 * 1024 * 1024

Handler = Callable[[str, Any], Awaitable[Any]]
"""``(method, params) -> result``; raise :class:`JsonRpcError` to answer with an error."""
NotificationHandler = Callable[[str, Any], Awaitable[None]]

_decoder: Final = msgspec.json.Decoder()


class AgentConnection:
    """The agent's end of a JSON-RPC connection over a reader and a writer."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_request: Handler,
        on_notification: NotificationHandler,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._max_line = max_line
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self.closed = False

    # -- sending -----------------------------------------------------------------------------
    async def request(self, method: str, params: Any, *, timeout: float | None = None) -> Any:
        """Ask the client; the answer's result, or :class:`JsonRpcError` for an error answer."""
        if self.closed:
            raise TransportFailure("the client has gone (stdin closed)")
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await asyncio.wait_for(future, timeout=timeout)
        except TimeoutError:
            raise TimeoutFailure(f"{method}: no answer from the client within {timeout:g} s") from None
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        # Sending goes on after the client closed stdin: it may still read the answers.
        async with self._write_lock:
            try:
                self._writer.write(encode_message(message))
                await self._writer.drain()
            except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
                self._close_pending(TransportFailure(f"cannot write to the client ({type(exc).__name__})"))
                raise TransportFailure(f"cannot write to the client ({type(exc).__name__})") from None

    async def _error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        with contextlib.suppress(SeamlineError):
            await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    # -- receiving ---------------------------------------------------------------------------
    async def serve(self) -> None:
        """Read until the client closes stdin; then wait for the running handlers."""
        try:
            async for line in self._lines():
                if line is None:
                    await self._error(None, INVALID_REQUEST, f"message longer than {self._max_line} bytes; dropped")
                    continue
                if line.strip():
                    await self._dispatch(line)
        finally:
            self.closed = True
            self._close_pending(TransportFailure("the client closed the connection"))

    async def wait_handlers(self, timeout: float | None = None) -> None:
        """Wait for the running handlers (at most ``timeout`` seconds; the rest keep running)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def _lines(self) -> Any:
        """Lines without their newline; ``None`` for a line over the limit (skipped whole)."""
        buffer = bytearray()
        dropping = False
        while True:
            chunk = await self._reader.read(1 << 16)
            if not chunk:
                if buffer and not dropping:
                    yield bytes(buffer)
                return
            buffer += chunk
            while True:
                end = buffer.find(b"\n")
                if end < 0:
                    if len(buffer) > self._max_line:
                        if not dropping:
                            dropping = True
                            yield None
                        buffer.clear()
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if dropping:
                    dropping = False  # the rest of the long line: gone
                    continue
                if len(line) > self._max_line:
                    yield None
                    continue
                yield line

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            await self._error(None, PARSE_ERROR, f"parse error: {exc}")
            return
        except UnicodeDecodeError as exc:  # msgspec's error for such bytes inside a string
            await self._error(None, PARSE_ERROR, f"parse error: not UTF-8: {exc}")
            return
        except RecursionError:  # msgspec's error for arrays and objects nested too deep
            await self._error(None, PARSE_ERROR, "parse error: nested too deep")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            await self._error(_id_of(message), INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method = message.get("method")
        if method is None:
            self._settle(message)
            return
        if not isinstance(method, str):
            await self._error(_id_of(message), INVALID_REQUEST, "method is not a string")
            return
        params = message.get("params")
        if "id" in message:
            task = asyncio.create_task(self._answer(message["id"], method, params))
        else:
            task = asyncio.create_task(self._notified(method, params))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _settle(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        future = self._pending.get(request_id) if isinstance(request_id, int) else None
        if future is None or future.done():
            return  # an answer nobody waits for (timed out, or not ours)
        error = message.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            text = str(error.get("message", "")) if isinstance(error, dict) else str(error)
            future.set_exception(JsonRpcError(code if isinstance(code, int) else INTERNAL_ERROR, text))
        else:
            future.set_result(message.get("result"))

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        try:
            result = await self._on_request(method, params)
        except JsonRpcError as exc:
            await self._error(request_id, exc.code, exc.rpc_message, exc.data)
            return
        except asyncio.CancelledError:
            await self._error(request_id, INTERNAL_ERROR, f"{method}: the agent is shutting down")
            raise
        except Exception as exc:  # noqa: BLE001 - a handler's bug must not leave the client waiting
            await self._error(request_id, INTERNAL_ERROR, f"{method} failed: {type(exc).__name__}: {exc}")
            return
        with contextlib.suppress(SeamlineError):
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _notified(self, method: str, params: Any) -> None:
        with contextlib.suppress(Exception):  # a notification has nobody to tell
            await self._on_notification(method, params)

    def _close_pending(self, failure: SeamlineError) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(failure)

    async def cancel_handlers(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _id_of(message: Any) -> Any:
    if isinstance(message, dict):
        value = message.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None
