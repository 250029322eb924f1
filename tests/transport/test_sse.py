"""The SSE parser and reader: the WHATWG rules, any split of the bytes, broken streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.errors import TransportFailure
from seamline.transport.sse import SseEvent, SseParser, read_sse

STREAM = (
    b": comment\n"
    b'event: ping\nid: 7\ndata: {"a": 1}\n\n'
    b"data: line one\r\ndata:line two\r\n\r\n"
    b"retry: 1500\rdata: caf\xc3\xa9\r\r"
    b"data\n\n"
    b"event: only-a-name\n\n"
)
EXPECTED = [
    SseEvent(data='{"a": 1}', event="ping", id="7"),
    SseEvent(data="line one\nline two", id="7"),
    SseEvent(data="café", id="7", retry=1500),
    SseEvent(data="", id="7", retry=1500),
]


def parse_all(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_the_rules_of_the_event_stream() -> None:
    assert parse_all([STREAM]) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert parse_all(chunks) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_parser(data: bytes) -> None:
    events = parse_all([data[: len(data) // 2], data[len(data) // 2 :]])
    assert all(isinstance(e.data, str) for e in events)


class Body:
    """An HTTP body: chunks, then a clean end or a read error."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self.chunks = chunks
        self.error = error

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error


async def collect(body: Body) -> tuple[list[SseEvent], Exception | None]:
    events: list[SseEvent] = []
    try:
        async for event in read_sse(body, what="the test stream"):
            events.append(event)
    except TransportFailure as exc:
        return events, exc
    return events, None


def test_a_clean_end_ends_the_events() -> None:
    events, error = asyncio.run(collect(Body([b"data: a\n\n", b"data: b\n\n"])))
    assert [e.data for e in events] == ["a", "b"] and error is None


def test_a_connection_that_drops_is_a_transport_failure_after_the_events_before_it() -> None:
    events, error = asyncio.run(collect(Body([b"data: a\n\n"], ConnectionResetError("reset by peer"))))
    assert [e.data for e in events] == ["a"]
    assert isinstance(error, TransportFailure) and "the test stream broke" in error.message
    assert "reset by peer" in error.message


def test_a_body_cut_in_the_middle_of_an_event_is_a_transport_failure() -> None:
    events, error = asyncio.run(collect(Body([b"data: a\n\ndata: half"])))
    assert [e.data for e in events] == ["a"]
    assert isinstance(error, TransportFailure) and "middle of an event" in error.message


@pytest.mark.parametrize("line", [b"id: a\x00b\n", b"retry: soon\n"])
def test_invalid_id_and_retry_are_ignored(line: bytes) -> None:
    (event,) = parse_all([line + b"data: x\n\n"])
    assert event.id is None and event.retry is None
