"""JSON-RPC 2.0 over a subprocess's stdio, one message per line (the ACP framing).

:class:`JsonRpcProcess` starts a program in its own process group (the same group
handling as :class:`~seamline.transport.subprocess.LineProcess`), writes requests and
notifications to its stdin, and reads its stdout: responses settle the pending request
with the same id, requests and notifications from the program go to the handlers given.

Failures are classified, never raw exceptions:

- the program exits (or closes stdout) while requests are pending: ``TransportFailure``
  naming the exit code and the tail of its stderr;
- a line that is not a JSON-RPC 2.0 message: ``ProviderFailure`` ("malformed JSON-RPC");
  the connection is closed, since nothing after garbage on the wire can be trusted;
- a request that gets no answer within its timeout: ``TimeoutFailure``;
- an error response: :class:`JsonRpcError` (a ``ProviderFailure`` with the code and data).

>>> encode_message({"jsonrpc": "2.0", "id": 1, "method": "ping"})
b'{"jsonrpc":"2.0","id":1,"method":"ping"}\\n'
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from seamline.errors import (
    InvalidRequest,
    ProviderFailure,
    SeamlineError,
    TimeoutFailure,
    TransportFailure,
)
from seamline.transport.subprocess import LineProcess, child_argv, spawn_group

__all__ = [
    "JsonRpcError",
    "JsonRpcProcess",
    "MessageObserver",
    "NotificationHandler",
    "RequestHandler",
    "decode_message",
    "encode_message",
]

JsonObject = dict[str, Any]
RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a request from the program: ``(method, params) -> result``; raise
:class:`JsonRpcError` to answer with an error."""
NotificationHandler = Callable[[str, Any], None]
MessageObserver = Callable[[str, JsonObject], None]
"""Sees every message: ``("in" | "out", message)`` (for a raw log)."""

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder()


class JsonRpcError(ProviderFailure):
    """An error response: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"JSON-RPC error {code}: {message}")
        self.code = code
        self.rpc_message = message
        self.data = data


def encode_message(message: Mapping[str, Any]) -> bytes:
    """One message as a line of compact JSON."""
    return _encoder.encode(message) + b"\n"


def decode_message(line: bytes) -> JsonObject:
    """Parse one line; raises :class:`ProviderFailure` unless it is a JSON-RPC 2.0 message."""
    try:
        message = _decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise ProviderFailure(f"malformed JSON-RPC from the program: not JSON ({exc}): {_clip(line)}") from None
    except UnicodeDecodeError as exc:  # msgspec's error for such bytes inside a string
        raise ProviderFailure(f"malformed JSON-RPC from the program: not UTF-8 ({exc}): {_clip(line)}") from None
    except RecursionError:  # msgspec's error for arrays and objects nested too deep
        raise ProviderFailure(f"malformed JSON-RPC from the program: nested too deep: {_clip(line)}") from None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ProviderFailure(f"malformed JSON-RPC from the program: not a JSON-RPC 2.0 message: {_clip(line)}")
    has_id = "id" in message
    if "method" in message:
        if not isinstance(message["method"], str):
            raise ProviderFailure(f"malformed JSON-RPC from the program: method is not a string: {_clip(line)}")
    elif not has_id or ("result" not in message and "error" not in message):
        raise ProviderFailure(f"malformed JSON-RPC from the program: neither request nor response: {_clip(line)}")
    return message


def _clip(line: bytes, size: int = 200) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= size else text[:size] + "…"


class JsonRpcProcess:
    """A program spoken to in JSON-RPC 2.0 over stdio, one message per line."""

    def __init__(
        self,
        process: LineProcess,
        stdin: asyncio.StreamWriter,
        *,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        observer: MessageObserver | None = None,
    ) -> None:
        self.process = process
        self._stdin = stdin
        self._on_request = on_request
        self._on_notification = on_notification
        self._observer = observer
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: why the connection ended (None while it works)
        self.failure: SeamlineError | None = None
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        observer: MessageObserver | None = None,
    ) -> JsonRpcProcess:
        """Start ``argv`` in a new process group with stdin kept open for messages."""
        if not argv:
            raise InvalidRequest("empty command line")
        try:
            proc = await spawn_group(
                *child_argv(argv, env=env, cwd=cwd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                limit=1 << 24,
            )
        except FileNotFoundError:
            raise InvalidRequest(f"executable not found: {argv[0]}") from None
        except PermissionError:
            raise InvalidRequest(f"executable is not runnable: {argv[0]}") from None
        except OSError as exc:
            raise TransportFailure(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        assert proc.stdin is not None
        return cls(
            LineProcess(proc, argv),
            proc.stdin,
            on_request=on_request,
            on_notification=on_notification,
            observer=observer,
        )

    # -- sending ---------------------------------------------------------------------------
    async def request(self, method: str, params: Any = None, *, timeout: float) -> Any:
        """Send a request and wait for its result, at most ``timeout`` seconds."""
        if self.failure is not None:
            raise self.failure
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._write(message)
            return await asyncio.wait_for(asyncio.shield(future), timeout=timeout)
        except TimeoutError:
            raise TimeoutFailure(f"{method}: no answer from {self._name()} within {timeout:g} s") from None
        finally:
            self._pending.pop(request_id, None)
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved: the failure was raised another way

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer expected)."""
        if self.failure is not None:
            raise self.failure
        message: JsonObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    async def _write(self, message: JsonObject) -> None:
        if self._observer is not None:
            self._observer("out", message)
        try:
            self._stdin.write(encode_message(message))
            await self._stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            # A failure the reader found first (a malformed line, then the exit that broke
            # this pipe) is the reason; the broken pipe is only its consequence.
            self._fail(self._exit_failure(f"cannot write to it ({type(exc).__name__})"))
            assert self.failure is not None
            raise self.failure from None

    # -- receiving -------------------------------------------------------------------------
    async def _read(self) -> None:
        try:
            async for line in self.process.lines():
                if not line.strip():
                    continue
                try:
                    message = decode_message(line)
                except ProviderFailure as exc:
                    self._fail(exc)
                    await self.process.end(grace=1.0)
                    return
                if self._observer is not None:
                    self._observer("in", message)
                self._dispatch(message)
        except Exception as exc:  # noqa: BLE001 - a broken pipe becomes a classified failure
            self._fail(TransportFailure(f"reading from {self._name()} failed: {type(exc).__name__}: {exc}"))
            return
        # stdout closed: the program ended (or is about to)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), timeout=2.0)
        self._fail(self._exit_failure("it closed its output"))

    def _dispatch(self, message: JsonObject) -> None:
        method = message.get("method")
        if method is None:
            future = self._pending.get(message["id"]) if isinstance(message.get("id"), int) else None
            if future is None or future.done():
                return  # an answer nobody waits for any more (timed out): dropped
            error = message.get("error")
            if error is not None:
                if isinstance(error, dict):
                    code = error.get("code")
                    future.set_exception(
                        JsonRpcError(
                            code if isinstance(code, int) else INTERNAL_ERROR,
                            str(error.get("message", "")),
                            error.get("data"),
                        )
                    )
                else:
                    future.set_exception(JsonRpcError(INTERNAL_ERROR, str(error)))
            else:
                future.set_result(message.get("result"))
            return
        params = message.get("params")
        if "id" in message:
            task = asyncio.create_task(self._answer(message["id"], method, params))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif self._on_notification is not None:
            self._on_notification(method, params)

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        reply: JsonObject = {"jsonrpc": "2.0", "id": request_id}
        if self._on_request is None:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"method not found: {method}"}
        else:
            try:
                reply["result"] = await self._on_request(method, params)
            except JsonRpcError as exc:
                reply["error"] = {"code": exc.code, "message": exc.rpc_message}
                if exc.data is not None:
                    reply["error"]["data"] = exc.data
            except Exception as exc:  # noqa: BLE001 - our handler's bug must not hang the program
                reply["error"] = {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}
        if self.failure is None:
            with contextlib.suppress(SeamlineError):
                await self._write(reply)

    def _exit_failure(self, how: str) -> TransportFailure:
        code = self.process.returncode
        status = f"exited with code {code}" if code is not None else "stopped answering"
        tail = self.process.stderr_tail(5).strip()
        detail = f"; stderr: {tail[-500:]}" if tail else ""
        return TransportFailure(f"{self._name()} {status} ({how}){detail}")

    def _fail(self, failure: SeamlineError) -> None:
        if self.failure is None:
            self.failure = failure
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self.failure)

    def _name(self) -> str:
        return os.path.basename(self.process.argv[0]) if self.process.argv else "the program"

    # -- lifetime ----------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.failure is None and self.process.returncode is None

    async def close(self, *, grace: float = 2.0) -> None:
        """Close stdin, then end the whole process group (SIGINT, SIGTERM, SIGKILL)."""
        if self.failure is None:
            self.failure = TransportFailure(f"{self._name()}: the connection was closed")
        with contextlib.suppress(Exception):
            self._stdin.close()
        # A well-behaved agent exits at end of input; give it a moment before signalling.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.process.wait()), timeout=min(grace, 1.0))
        await self.process.end(grace=grace)
        self._fail(self.failure)
        for task in (self._reader, *self._tasks):
            task.cancel()
        for task in (self._reader, *self._tasks):
            with contextlib.suppress(BaseException):
                await task
