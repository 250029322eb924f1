"""Requests take turns at their upstream: a limit of requests at once, shared by every
gateway of the process on one loop (as the sessions of `serve`, `race` or a pipeline each
have their own), and an upstream's ``retry-after`` holding the requests that follow.

The upstream is a small asyncio server in the same loop that counts the requests it holds at
once and logs, on the loop's clock, when each arrived and when each was answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

from seamline.errors import InvalidRequest
from seamline.gateway import ModelGateway, Upstream
from seamline.gateway.http1 import Head
from seamline.gateway.upstream_slots import MAX_HOLD_S, retry_after_s, upstream_slots
from seamline.providers.programs.model_gateway import MAX_CONCURRENT_VAR, gateway_max_concurrent

REAL_KEY = "sk-real-canary-limits"
BODY = json.dumps({"model": "claude-test-1", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
USAGE_ANSWER = json.dumps(
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


@dataclass
class CountingUpstream:
    """An Anthropic-shaped upstream that keeps count of the requests it holds at once. It
    answers when ``release`` is set; else, with ``gather`` set, a moment after it holds that
    many at once (or ``total`` have arrived, for the last few); else at once."""

    release: asyncio.Event | None = None
    gather: int | None = None
    total: int = 0
    refusals: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """Answers to give first, in order: (status, extra header fields)."""
    now: int = 0
    most: int = 0
    arrivals: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        assert f"x-api-key: {REAL_KEY}".encode() in head
        self.arrivals.append(loop.time())
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            if self.release is not None:
                await self.release.wait()
            if self.gather is not None:
                while self.now < self.gather and len(self.arrivals) < self.total:
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.02)  # held a moment longer: one more let through would show
            if self.refusals:
                status, extra = self.refusals.pop(0)
                body = json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
                fields = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                writer.write(
                    f"HTTP/1.1 {status} Too Many Requests\r\ncontent-type: application/json\r\n{fields}"
                    f"content-length: {len(body)}\r\n\r\n{body}".encode()
                )
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(USAGE_ANSWER)}\r\n\r\n".encode()
                    + USAGE_ANSWER
                )
            await writer.drain()
            self.answered.append(loop.time())
        finally:
            self.now -= 1
            writer.close()


async def _post(url: str, placeholder: str) -> tuple[int, bytes, bytes]:
    """One request as a program sends it: status, head and body of the answer."""
    port = urlsplit(url).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {placeholder}\r\n"
        f"content-type: application/json\r\nconnection: close\r\ncontent-length: {len(BODY)}\r\n\r\n{BODY}".encode()
    )
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ", 2)[1]) if head else 0), head, body  # 0: no answer


def run(test: Callable[[CountingUpstream], Awaitable[None]], upstream: CountingUpstream) -> None:
    async def main() -> None:
        await upstream.start()
        try:
            # Bounded, so that a request that never gets its turn fails the test instead of
            # hanging it (no test here waits anywhere near this long when things work).
            await asyncio.wait_for(test(upstream), 30)
        finally:
            await upstream.close()

    asyncio.run(main())


async def _sessions(upstream: CountingUpstream, count: int, limit: int | None) -> list[int]:
    """``count`` requests at once, each from its own gateway (as ``count`` sessions)."""
    gateways = [ModelGateway() for _ in range(count)]
    for gateway in gateways:
        await gateway.start()
    try:
        bound = [(g, g.bind(Upstream("anthropic", upstream.url, REAL_KEY, max_concurrent=limit))) for g in gateways]
        answers = await asyncio.gather(*(_post(g.base_url(b), b.placeholder) for g, b in bound))
        assert all(b.requests == 1 and len(b.usages) == 1 for _, b in bound)  # each relayed, each metered
        return [status for status, _, _ in answers]
    finally:
        for gateway in gateways:
            await gateway.close()


def test_twenty_sessions_with_a_limit_of_four_all_succeed_four_at_a_time() -> None:
    async def test(upstream: CountingUpstream) -> None:
        statuses = await _sessions(upstream, 20, limit=4)
        assert statuses == [200] * 20  # none failed: they waited their turn
        assert len(upstream.arrivals) == 20
        assert upstream.most == 4  # never more than four upstream at once

    # The upstream answers none until it holds four at once (or all twenty have come): the
    # four slots are used in full, and a fifth let through beside them would arrive while
    # they are held.
    run(test, CountingUpstream(gather=4, total=20))


def test_without_a_limit_the_same_twenty_arrive_together() -> None:
    async def test(upstream: CountingUpstream) -> None:
        statuses = await _sessions(upstream, 20, limit=None)
        assert statuses == [200] * 20
        assert upstream.most == 20  # nothing waited: what holds them to four above is the limit

    run(test, CountingUpstream(gather=20, total=20))


def test_the_smallest_limit_named_holds_and_a_later_gateway_shares_the_slots() -> None:
    async def test(upstream: CountingUpstream) -> None:
        upstream.release = asyncio.Event()
        small, large = ModelGateway(), ModelGateway()
        await small.start()
        await large.start()
        try:
            a = small.bind(Upstream("anthropic", upstream.url, REAL_KEY, max_concurrent=2))
            b = large.bind(Upstream("anthropic", upstream.url + "/v1", REAL_KEY, max_concurrent=10))
            sends = [_post(small.base_url(a), a.placeholder) for _ in range(3)]
            sends += [_post(large.base_url(b), b.placeholder) for _ in range(3)]
            tasks = [asyncio.ensure_future(s) for s in sends]
            slots = upstream_slots(Upstream("anthropic", upstream.url).target)
            while slots.active + slots.waiting < 6:
                await asyncio.sleep(0.01)
            assert slots.limit == 2 and slots.active == 2 and slots.waiting == 4
            while len(upstream.arrivals) < 2:  # the two let through may still be on their way
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert len(upstream.arrivals) == 2  # the other four wait at the gateway, not upstream
            upstream.release.set()
            statuses = [status for status, _, _ in await asyncio.gather(*tasks)]
            assert statuses == [200] * 6 and upstream.most == 2
            assert slots.active == 0 and slots.waiting == 0 and slots.limit is None  # all given back
        finally:
            await small.close()
            await large.close()

    run(test, CountingUpstream())


def test_a_retry_after_holds_the_next_request_and_the_429_reaches_the_program_unchanged() -> None:
    async def test(upstream: CountingUpstream) -> None:
        first_gw, second_gw = ModelGateway(), ModelGateway()
        await first_gw.start()
        await second_gw.start()
        try:
            first = first_gw.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            second = second_gw.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            status, head, body = await _post(first_gw.base_url(first), first.placeholder)
            assert status == 429 and b"retry-after: 1\r\n" in head.lower()
            assert json.loads(body)["error"]["type"] == "rate_limit_error"  # the vendor's words, as sent
            slots = upstream_slots(Upstream("anthropic", upstream.url).target)
            assert slots.held and slots.held_until >= upstream.answered[0] + 1.0

            sending = asyncio.ensure_future(_post(second_gw.base_url(second), second.placeholder))
            while slots.waiting < 1:
                await asyncio.sleep(0.01)
            # Inside the hold: the second request waits at the gateway; the upstream has
            # seen only the first.
            assert slots.held and len(upstream.arrivals) == 1
            status, _, _ = await sending
            assert status == 200
            # It was let through once the hold had passed, by the loop's own clock.
            assert upstream.arrivals[1] >= slots.held_until
            assert len(second.usages) == 1
        finally:
            await first_gw.close()
            await second_gw.close()

    run(test, CountingUpstream(refusals=[(429, {"retry-after": "1"})]))


def test_a_429_without_retry_after_holds_nothing() -> None:
    async def test(upstream: CountingUpstream) -> None:
        gateway = ModelGateway()
        await gateway.start()
        try:
            binding = gateway.bind(Upstream("anthropic", upstream.url, REAL_KEY))
            assert (await _post(gateway.base_url(binding), binding.placeholder))[0] == 429
            slots = upstream_slots(Upstream("anthropic", upstream.url).target)
            assert not slots.held
            assert (await _post(gateway.base_url(binding), binding.placeholder))[0] == 200
        finally:
            await gateway.close()

    run(test, CountingUpstream(refusals=[(429, {})]))


def test_a_waiting_request_cancelled_by_the_gateway_closing_gives_its_place_back() -> None:
    async def test(upstream: CountingUpstream) -> None:
        upstream.release = asyncio.Event()
        first_gw, second_gw = ModelGateway(), ModelGateway()
        await first_gw.start()
        await second_gw.start()
        first = first_gw.bind(Upstream("anthropic", upstream.url, REAL_KEY, max_concurrent=1))
        second = second_gw.bind(Upstream("anthropic", upstream.url, REAL_KEY, max_concurrent=1))
        slots = upstream_slots(Upstream("anthropic", upstream.url).target)
        going = asyncio.ensure_future(_post(first_gw.base_url(first), first.placeholder))
        waiting = asyncio.ensure_future(_post(second_gw.base_url(second), second.placeholder))
        while slots.waiting < 1:
            await asyncio.sleep(0.01)
        await second_gw.close()  # its session ended while its request waited
        assert (await waiting)[0] == 0  # the program's connection ends without an answer
        assert slots.waiting == 0 and slots.active == 1 and slots.limit == 1
        upstream.release.set()
        assert (await going)[0] == 200
        assert slots.active == 0 and slots.limit is None and len(upstream.arrivals) == 1
        await first_gw.close()

    run(test, CountingUpstream())


def _answer(status: int, **fields: str) -> Head:
    return Head(f"HTTP/1.1 {status} X", tuple((k.replace("_", "-"), v) for k, v in fields.items()))


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (_answer(429, retry_after="1"), 1.0),
        (_answer(529, retry_after="2.5"), 2.5),
        (_answer(503, retry_after="3600"), MAX_HOLD_S),  # bounded
        (_answer(429, retry_after_ms="250", retry_after="9"), 0.25),  # OpenAI's finer figure first
        (_answer(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"), 0.0),  # a date already past
        (_answer(429, retry_after="soon"), None),
        (_answer(429, retry_after="nan"), None),
        (_answer(429), None),
        (_answer(200, retry_after="5"), None),  # only a refusal holds
        (_answer(500, retry_after="5"), None),
    ],
)
def test_retry_after_is_read_from_refusals_only_and_bounded(answer: Head, expected: float | None) -> None:
    assert retry_after_s(answer) == expected


def test_the_limit_comes_from_the_option_else_the_environment() -> None:
    assert gateway_max_concurrent("4", {MAX_CONCURRENT_VAR: "9"}) == 4
    assert gateway_max_concurrent(None, {MAX_CONCURRENT_VAR: "9"}) == 9
    assert gateway_max_concurrent(None, {}) is None
    assert gateway_max_concurrent("0", {MAX_CONCURRENT_VAR: "9"}) is None  # 0: no limit
    with pytest.raises(InvalidRequest, match=MAX_CONCURRENT_VAR):
        gateway_max_concurrent(None, {MAX_CONCURRENT_VAR: "many"})
