"""Upstream connections are kept alive and reused: sequential requests share one connection,
concurrent ones open no more than are in flight, a connection the server closed while idle
fails no request (sent once more, on a new one, when nothing of an answer came), an answer
that says ``connection: close`` or that the program hung up on is never reused, and closing
the gateway closes them all.

The upstream is a small threaded HTTP/1.1 server on 127.0.0.1 (it outlives event loops)
that speaks Anthropic's wire format (JSON, or SSE over chunked HTTP), counts the connections
it accepted and holds open, and misbehaves on request: it closes after each answer without
saying so, drops or half-answers the next request on a kept connection, says
``connection: close`` and keeps serving anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from seamline.events import Usage
from seamline.gateway import ModelGateway, Upstream
from seamline.gateway.upstream_pool import upstream_pool
from tests.fakes.tls import self_signed_certificate

REAL_KEY = "sk-real-canary-pool"
BODY = json.dumps({"model": "claude-test-1", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
JSON_ANSWER = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
).encode()


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


FRAMES = [
    _sse(
        "message_start", {"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 5}}}
    ),
    _sse("content_block_delta", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hel"}}),
    _sse("content_block_delta", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "lo"}}),
    _sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 2}}),
    _sse("message_stop", {"type": "message_stop"}),
]

Misbehaviour = Literal[
    "none", "close-after-answer", "drop-next", "reset-next", "half-head-next", "say-close", "no-content"
]


@dataclass
class PoolUpstream:
    """A threaded HTTP/1.1 upstream that counts its connections and requests."""

    misbehave: Misbehaviour = "none"
    frame_delay: float = 0.0
    gather: int = 0
    """Hold each answer until this many requests are in at once (or 2 s have passed)."""
    tls: ssl.SSLContext | None = None
    accepted: int = 0
    open: int = 0
    received: int = 0
    answered: int = 0
    now: int = 0
    most: int = 0
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _sock: socket.socket | None = None

    @property
    def url(self) -> str:
        assert self._sock is not None
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> PoolUpstream:
        self._sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._sock is not None
        self._sock.close()

    def wait_open(self, count: int) -> int:
        """The connections open once they are ``count`` (or after a second)."""
        deadline = time.monotonic() + 1.0
        while self.open != count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.open

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self.open += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                with self._lock:
                    self.open -= 1
                return
        stream = conn.makefile("rb")
        try:
            served = 0
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = stream.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    int(x.split(b":", 1)[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")
                )
                body = json.loads(stream.read(length))
                assert f"x-api-key: {REAL_KEY}".encode() in head and b"connection: keep-alive" in head.lower()
                with self._lock:
                    self.received += 1
                    self.now += 1
                    self.most = max(self.most, self.now)
                    self._lock.notify_all()
                try:
                    if served and self.misbehave == "drop-next":
                        return  # read, never answered: as a server that closed it just then
                    if served and self.misbehave == "reset-next":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        return
                    if served and self.misbehave == "half-head-next":
                        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-")
                        return
                    if self.gather:
                        with self._lock:
                            self._lock.wait_for(lambda: self.now >= self.gather, timeout=2.0)
                        time.sleep(0.02)
                    self._answer(conn, stream=bool(body.get("stream")))
                finally:
                    with self._lock:
                        self.now -= 1
                served += 1
                with self._lock:
                    self.answered += 1
                if self.misbehave == "close-after-answer":
                    return  # without having said so
        except OSError:
            return
        finally:
            stream.close()
            conn.close()
            with self._lock:
                self.open -= 1

    def _answer(self, conn: socket.socket, *, stream: bool) -> None:
        close = "connection: close\r\n" if self.misbehave == "say-close" else ""
        if self.misbehave == "no-content":  # no body, no framing: it ends at the head
            conn.sendall(b"HTTP/1.1 204 No Content\r\nrequest-id: req_1\r\n\r\n")
            return
        if not stream:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nrequest-id: req_1\r\n"
                + f"{close}content-length: {len(JSON_ANSWER)}\r\n\r\n".encode()
                + JSON_ANSWER
            )
            return
        conn.sendall(
            f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{close}transfer-encoding: chunked\r\n\r\n".encode()
        )
        for frame in FRAMES:
            conn.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
            time.sleep(self.frame_delay)
        conn.sendall(b"0\r\n\r\n")


def _request(placeholder: str, *, stream: bool = False) -> bytes:
    body = json.dumps({**json.loads(BODY), "stream": stream})
    return (
        f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {placeholder}\r\n"
        f"content-type: application/json\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def _post(gateway: ModelGateway, placeholder: str, *, stream: bool = False) -> bytes:
    """One request as a program sends it, on its own connection: the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(_request(placeholder, stream=stream))
    await writer.drain()
    try:
        data = await reader.read()
    except ConnectionResetError:
        data = b""
    writer.close()
    return data


def _run(test: Callable[[ModelGateway], Awaitable[None]]) -> None:
    async def main() -> None:
        gateway = ModelGateway()
        await gateway.start()
        try:
            await asyncio.wait_for(test(gateway), 30)
        finally:
            await gateway.close()

    asyncio.run(main())


def _ok(answer: bytes, *, stream: bool = False) -> bool:
    return answer.startswith(b"HTTP/1.1 200") and (b'"lo"' in answer if stream else answer.endswith(JSON_ANSWER))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_sequential_requests_reach_the_upstream_on_one_connection(stream: bool) -> None:
    with PoolUpstream() as upstream:
        seen: list[Usage] = []

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY), on_usage=seen.append)
            for _ in range(5):
                assert _ok(await _post(gateway, binding.placeholder, stream=stream), stream=stream)
            assert upstream_pool().idle() == 1

        _run(test)
        assert upstream.accepted == 1 and upstream.received == 5
    assert len(seen) == 5  # each metered once


def test_concurrent_requests_open_no_more_connections_than_are_in_flight() -> None:
    with PoolUpstream(gather=4) as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            for _ in range(3):  # three waves of four at once
                answers = await asyncio.gather(*(_post(gateway, binding.placeholder) for _ in range(4)))
                assert all(_ok(a) for a in answers)
            assert len(binding.usages) == 12 and upstream_pool().idle() == 4

        _run(test)
        assert upstream.received == 12 and upstream.most == 4
        assert upstream.accepted == 4  # the later waves took the first wave's connections


@pytest.mark.parametrize("misbehave", ["close-after-answer", "drop-next", "reset-next"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_upstream_that_closes_kept_connections_fails_no_request(misbehave: Misbehaviour, stream: bool) -> None:
    # close-after-answer: the server closes after each answer without saying so (seen
    # before reuse, or on the write); drop-next / reset-next: it reads the next request on
    # a kept connection and closes (or resets) without a byte of answer, as a server whose
    # idle timeout fires just as the request arrives: sent once more, on a new connection.
    with PoolUpstream(misbehave=misbehave) as upstream:
        seen: list[Usage] = []

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY), on_usage=seen.append)
            for _ in range(4):
                assert _ok(await _post(gateway, binding.placeholder, stream=stream), stream=stream)
                await asyncio.sleep(0.05)  # the server's close has arrived by the next request
            assert binding.failures == [] and binding.requests == 4

        _run(test)
        assert upstream.answered == 4
    assert len(seen) == 4  # each metered once


def test_a_kept_connection_that_fails_after_part_of_an_answer_is_not_sent_again() -> None:
    # A byte of the answer came: the server had the request, so it is not sent twice.
    with PoolUpstream(misbehave="half-head-next") as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            assert _ok(await _post(gateway, binding.placeholder))
            assert await _post(gateway, binding.placeholder) == b""  # the program sees a failed connection

        _run(test)
        assert upstream.received == 2 and upstream.accepted == 1


def test_an_answer_that_says_connection_close_is_not_pooled() -> None:
    # This upstream says close and would serve on anyway: the gateway takes it at its word.
    with PoolUpstream(misbehave="say-close") as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            for stream in (False, True, False):
                assert _ok(await _post(gateway, binding.placeholder, stream=stream), stream=stream)
            assert upstream_pool().idle() == 0

        _run(test)
        assert upstream.accepted == 3 and upstream.wait_open(0) == 0


def test_a_program_that_hangs_up_mid_stream_leaves_no_half_read_connection() -> None:
    with PoolUpstream(frame_delay=0.1) as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
            writer.write(_request(binding.placeholder, stream=True))
            await reader.readuntil(b"message_start")
            writer.transport.abort()  # as Codex does at `response.completed`
            await asyncio.wait_for(gateway.idle(), 5)
            assert len(binding.usages) == 1  # still metered (input tokens from message_start)
            assert upstream_pool().idle() == 0
            assert await asyncio.to_thread(upstream.wait_open, 0) == 0  # that connection was closed
            assert _ok(await _post(gateway, binding.placeholder, stream=True), stream=True)

        _run(test)
        assert upstream.accepted == 2


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_closing_the_gateway_closes_every_kept_connection() -> None:
    with PoolUpstream() as upstream:
        before = _fds()

        async def main() -> None:
            first, second = ModelGateway(), ModelGateway()
            await first.start()
            await second.start()
            a = first.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            b = second.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            await asyncio.gather(_post(first, a.placeholder), _post(second, b.placeholder))
            assert upstream.wait_open(2) == 2
            await first.close()
            # the pool is the loop's, shared: one gateway left open keeps it
            assert upstream_pool().idle() == 2 and upstream.open == 2
            assert _ok(await _post(second, b.placeholder)) and upstream.accepted == 2
            await second.close()
            assert await asyncio.to_thread(upstream.wait_open, 0) == 0

        asyncio.run(main())
        assert _fds() == before


def test_a_connection_of_one_loop_is_never_taken_on_another() -> None:
    with PoolUpstream() as upstream:
        first_loop = asyncio.new_event_loop()
        gateway = ModelGateway()
        first_loop.run_until_complete(gateway.start())
        try:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            assert _ok(first_loop.run_until_complete(_post(gateway, binding.placeholder)))

            async def on_another_loop() -> None:
                other = ModelGateway()
                await other.start()
                try:
                    bound = other.bind(Upstream("anthropic", upstream.url, REAL_KEY))
                    assert _ok(await _post(other, bound.placeholder))
                finally:
                    await other.close()

            asyncio.run(on_another_loop())
            assert upstream.accepted == 2  # the first loop's idle connection stayed there
            assert _ok(first_loop.run_until_complete(_post(gateway, binding.placeholder)))
            assert upstream.accepted == 2  # and is still good on its own loop
        finally:
            first_loop.run_until_complete(gateway.close())
            first_loop.close()
        assert upstream.wait_open(0) == 0


def test_an_answer_without_a_body_keeps_its_connection() -> None:
    # A 204 has no length and no chunking, and no body: it ends at its head (it must not be
    # read to the connection's end, which a kept connection never reaches).
    with PoolUpstream(misbehave="no-content") as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            for _ in range(3):
                answer = await asyncio.wait_for(_post(gateway, binding.placeholder), 5)
                assert answer.startswith(b"HTTP/1.1 204")

        _run(test)
        assert upstream.accepted == 1 and upstream.received == 3


def test_idle_connections_are_closed_after_the_idle_timeout_and_capped() -> None:
    with PoolUpstream(gather=4) as upstream:

        async def test(gateway: ModelGateway) -> None:
            pool = upstream_pool()
            pool.max_idle, pool.idle_timeout_s = 2, 0.2
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            answers = await asyncio.gather(*(_post(gateway, binding.placeholder) for _ in range(4)))
            assert all(_ok(a) for a in answers)
            assert pool.idle() == 2  # four came back; two were kept
            assert await asyncio.to_thread(upstream.wait_open, 2) == 2
            await asyncio.sleep(0.3)
            assert pool.idle() == 0  # past the idle timeout
            assert await asyncio.to_thread(upstream.wait_open, 0) == 0

        _run(test)


def _self_signed(folder: str) -> tuple[str, str]:
    pytest.importorskip("cryptography")
    made = self_signed_certificate(Path(folder))
    assert made is not None
    return str(made[0]), str(made[1])


@pytest.mark.parametrize("misbehave", ["none", "close-after-answer", "drop-next"])
def test_https_connections_are_kept_alive_and_a_closed_one_is_replaced(
    tmp_path: object, misbehave: Misbehaviour
) -> None:
    cert, key = _self_signed(str(tmp_path))
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=cert)
    with PoolUpstream(misbehave=misbehave, tls=served) as upstream:

        async def test(gateway: ModelGateway) -> None:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY, ssl_context=trusted))
            for stream in (False, True, False):
                assert _ok(await _post(gateway, binding.placeholder, stream=stream), stream=stream)
                await asyncio.sleep(0.05)
            assert len(binding.usages) == 3 and binding.failures == []

        _run(test)
        assert upstream.answered == 3
        assert upstream.accepted == (1 if misbehave == "none" else 3)  # a new one for each that was closed
        assert upstream.wait_open(0) == 0
