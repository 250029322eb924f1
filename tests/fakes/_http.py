"""The HTTP half shared by the fake model-API servers: a scripted queue, SSE over chunked
HTTP/1.1, request recording, and a command-line entry point.

A fake is a subclass of :class:`FakeAPI` that turns one script entry into either a JSON
response or a list of SSE frames in its vendor's exact wire format. Everything here binds
to 127.0.0.1 only.

Script entries are plain dicts (so a JSON file can hold them). Keys shared by both fakes:

- ``match``: ``{"path": "...", "model": "...", "stream": bool}``: the entry answers only a
  request whose path contains ``path``, whose model contains ``model``, whose ``stream``
  flag equals ``stream``. Without ``match`` an entry answers the next model request.
- ``times``: how many requests the entry answers (default 1; ``-1``: for ever).
- ``delay``: seconds before the response starts; ``chunk_delay``: seconds between frames.
- ``status`` (+ ``error_type``, ``message``, ``retry_after``, ``headers``): an HTTP error
  with the vendor's error body; ``retry_after`` becomes the ``Retry-After`` header.
- ``text`` (or ``chunks``, a list of deltas), ``reasoning``, ``tool_calls`` (each
  ``{"id"?, "name", "arguments": {...}}``), ``usage`` (``input_tokens`` counts every input
  token, cached ones included, as seamline counts; ``output_tokens``, ``cache_read_tokens``,
  ``cache_write_tokens``; each fake converts to its vendor's convention), ``model`` (the
  model the server says answered; default the one requested), ``stop_reason``.
- ``error_after``: N: after N frames an in-stream error frame (``error_type``, ``message``).
- ``cut_after``: N: after N frames the stream stops without its final frame; ``cut``:
  ``"abrupt"`` (the connection drops mid-body, the default), ``"clean"`` (the body ends
  properly, only the final frames are missing) or ``"stall"`` (the connection stays open and
  silent until the fake stops, as a stuck endpoint does).

A request that no entry matches gets the ``fallback`` entry when one is set, else a 500
whose message says the script is exhausted (so a test that sends one call too many fails
loudly).

A WebSocket upgrade request (Codex tries its Responses WebSocket first when the provider
allows it) gets a 404 like any unknown route; with ``refuse_websocket = True`` the fake
drops the connection during the handshake instead, as a proxy that blocks WebSockets does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeAPI", "JsonReply", "RecordedRequest", "StreamReply", "main_for", "sse_frame"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it (headers lower-cased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw_body: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body": self.body,
        }


@dataclass
class JsonReply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamReply:
    """SSE frames to send; ``cut_after`` frames then stop (``cut``: abrupt or clean)."""

    frames: list[bytes]
    chunk_delay: float = 0.0
    cut_after: int | None = None
    cut: str = "abrupt"
    headers: dict[str, str] = field(default_factory=dict)


def sse_frame(data: Any, *, event: str | None = None) -> bytes:
    """One SSE frame: optional ``event:`` line, one ``data:`` line, blank line."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read records, not logs
        return None

    def do_HEAD(self) -> None:
        # Clients probe reachability with HEAD /; answer it and keep it in the record.
        parts = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.api._record(RecordedRequest("HEAD", parts.path, parse_qs(parts.query), headers, None, b""))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        if self.server.api.refuse_websocket and self.headers.get("Upgrade", "").lower() == "websocket":
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            self.server.api._record(
                RecordedRequest(self.command, parts.path, parse_qs(parts.query), headers, None, b"")
            )
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        request = RecordedRequest(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw_body=raw,
        )
        api = self.server.api
        api._record(request)
        try:
            reply, delay = api._reply_for(request)
        except Exception as exc:  # noqa: BLE001 - a fake's bug must reach the test as a 500, not a hang
            reply, delay = JsonReply(500, {"error": {"message": f"fake server error: {exc!r}"}}), 0.0
        if delay and api._stopping.wait(delay):
            return
        try:
            if isinstance(reply, JsonReply):
                self._send_json(reply)
            else:
                self._send_stream(reply, request)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_json(self, reply: JsonReply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_stream(self, reply: StreamReply, request: RecordedRequest) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        frames = reply.frames
        if reply.cut_after is not None:
            frames = frames[: reply.cut_after]
        api = self.server.api
        for i, frame in enumerate(frames):
            if i and reply.chunk_delay and api._stopping.wait(reply.chunk_delay):
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
        if reply.cut_after is not None and reply.cut == "stall":
            api._stopping.wait()
            return
        if reply.cut_after is not None and reply.cut == "abrupt":
            # Drop the connection mid-body: no terminating chunk, as a dying proxy would.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        api._delivered(request)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, api: FakeAPI) -> None:
        self.api = api
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client dropping a keep-alive connection is normal; anything else is shown.
        import sys

        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class FakeAPI:
    """Base of a fake vendor API: holds the script, records requests, serves on 127.0.0.1.

    Use as a context manager (``with FakeOpenAI(script=[...]) as fake: fake.base_url``)
    or ``start()`` / ``stop()``.
    """

    #: path prefix the SDK appends routes to (``/v1`` for both vendors)
    base_path = "/v1"

    def __init__(
        self,
        script: Sequence[Mapping[str, Any]] = (),
        *,
        port: int = 0,
        api_key: str | None = None,
        fallback: Mapping[str, Any] | None = None,
        models: Sequence[str] = (),
    ) -> None:
        self._script: list[dict[str, Any]] = [dict(e) for e in script]
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._port = port
        self.api_key = api_key
        self.fallback = dict(fallback) if fallback is not None else None
        self.models = list(models)
        self.requests: list[RecordedRequest] = []
        self.record_file: Path | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0
        #: the requests whose streamed reply was sent whole (the last frame, usage included, written)
        self.delivered: list[RecordedRequest] = []
        #: drop WebSocket upgrade requests mid-handshake instead of answering 404
        self.refuse_websocket = False

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> FakeAPI:
        self._server = _Server(self._port, self)
        self._thread = threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start the fake first"
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL to give an SDK or a CLI as its base URL (with ``/v1``)."""
        return self.root_url + self.base_path

    # -- script ------------------------------------------------------------------------
    def push(self, *entries: Mapping[str, Any]) -> None:
        """Add entries at the end of the script."""
        with self._lock:
            self._script.extend(dict(e) for e in entries)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def model_requests(self) -> list[RecordedRequest]:
        """The recorded requests that asked for a model response."""
        return [r for r in self.requests if r.method == "POST" and self.is_model_path(r.path)]

    def next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}{self._counter:06d}"

    def _delivered(self, request: RecordedRequest) -> None:
        with self._lock:
            self.delivered.append(request)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)
            if self.record_file is not None:
                with self.record_file.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(request.to_json()) + "\n")

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        body = request.body if isinstance(request.body, dict) else {}
        with self._lock:
            for i, entry in enumerate(self._script):
                match = entry.get("match") or {}
                if "path" in match and match["path"] not in request.path:
                    continue
                if "model" in match and match["model"] not in str(body.get("model", "")):
                    continue
                if "stream" in match and bool(match["stream"]) != bool(body.get("stream")):
                    continue
                times = int(entry.get("times", 1))
                if times == 1:
                    self._script.pop(i)
                elif times > 1:
                    entry["times"] = times - 1
                return entry
        return self.fallback

    def _reply_for(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        path = request.path
        if request.method == "GET" and path.rstrip("/") in ("", "/", self.base_path):
            return JsonReply(200, {"ok": True}), 0.0
        denied = self.check_auth(request)
        if denied is not None:
            return denied, 0.0
        if request.method == "GET" and path.startswith(self.base_path + "/models"):
            return self.models_reply(path[len(self.base_path + "/models") :].strip("/")), 0.0
        if request.method == "POST" and self.is_model_path(path):
            body = request.body if isinstance(request.body, dict) else None
            if body is None:
                return self.error_reply(400, "invalid_request_error", "request body is not a JSON object"), 0.0
            entry = self._take(request)
            if entry is None:
                return self.error_reply(500, "api_error", "fake script exhausted: no entry for this request"), 0.0
            delay = float(entry.get("delay", 0) or 0)
            if "status" in entry:
                reply = self.error_reply(
                    int(entry["status"]),
                    str(entry.get("error_type") or self.default_error_type(int(entry["status"]))),
                    str(entry.get("message") or f"scripted HTTP {entry['status']}"),
                )
                if "retry_after" in entry:
                    reply.headers["Retry-After"] = str(entry["retry_after"])
                reply.headers.update(entry.get("headers") or {})
                return reply, delay
            return self.answer(request, body, entry), delay
        return self.other_route(request)

    # -- vendor hooks ------------------------------------------------------------------
    def is_model_path(self, path: str) -> bool:
        raise NotImplementedError

    def check_auth(self, request: RecordedRequest) -> JsonReply | None:
        raise NotImplementedError

    def error_reply(self, status: int, error_type: str, message: str) -> JsonReply:
        raise NotImplementedError

    def default_error_type(self, status: int) -> str:
        raise NotImplementedError

    def models_reply(self, model_id: str) -> JsonReply:
        raise NotImplementedError

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        raise NotImplementedError

    def other_route(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        return self.error_reply(404, "not_found_error", f"no route {request.method} {request.path}"), 0.0


def chunks_of(entry: Mapping[str, Any]) -> list[str]:
    """The text deltas of an entry: ``chunks`` as given, else ``text`` split after spaces."""
    if entry.get("chunks") is not None:
        return [str(c) for c in entry["chunks"]]
    text = entry.get("text")
    if not text:
        return []
    words = str(text).split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


def json_pieces(arguments: Mapping[str, Any], size: int = 7) -> list[str]:
    """Tool-call arguments as the JSON string split into small pieces, as vendors stream them."""
    text = json.dumps(dict(arguments), separators=(",", ":"))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def usage_of(entry: Mapping[str, Any]) -> dict[str, int]:
    usage = dict(entry.get("usage") or {})
    return {
        "input_tokens": int(usage.get("input_tokens", 10)),
        "output_tokens": int(usage.get("output_tokens", 5)),
        "cache_read_tokens": int(usage.get("cache_read_tokens", 0)),
        "cache_write_tokens": int(usage.get("cache_write_tokens", 0)),
    }


def main_for(factory: type[FakeAPI], argv: Sequence[str] | None = None) -> int:
    """``python -m tests.fakes.<vendor> --port N --script FILE``: serve until SIGTERM/SIGINT.

    Prints ``listening <base_url>`` on stdout once ready (useful with ``--port 0``).
    """
    parser = argparse.ArgumentParser(prog=f"python -m {factory.__module__}", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--script", type=Path, help="JSON file: a list of script entries")
    parser.add_argument("--fallback", help="JSON object: the entry for requests no script entry matches")
    parser.add_argument("--api-key", help="refuse requests that do not carry this key (401)")
    parser.add_argument("--record", type=Path, help="append every request received to this JSONL file")
    parser.add_argument("--model", action="append", default=[], help="a model to list on GET /v1/models")
    args = parser.parse_args(argv)
    script = json.loads(args.script.read_text()) if args.script else []
    fallback = json.loads(args.fallback) if args.fallback else None
    fake = factory(script, port=args.port, api_key=args.api_key, fallback=fallback, models=args.model)
    fake.record_file = args.record
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    fake.start()
    print(f"listening {fake.base_url}", flush=True)
    try:
        while not done.wait(0.2):
            pass
    finally:
        fake.stop()
    return 0
