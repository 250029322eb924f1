"""Server-sent events: an incremental parser and a reader over an HTTP response.

:class:`SseParser` follows the WHATWG event-stream rules: lines end in LF, CRLF or CR;
``data:`` lines of one event join with ``\\n``; a blank line dispatches; ``event:``,
``id:`` and ``retry:`` set fields; ``:`` starts a comment; one space after the colon is
dropped. Bytes may arrive cut anywhere, even inside a UTF-8 character.

>>> parser = SseParser()
>>> [e.data for e in parser.feed(b"data: one\\n\\ndata: t")] + [e.data for e in parser.feed(b"wo\\n\\n")]
['one', 'two']

:func:`read_sse` yields the events of a streaming HTTP response and turns a stream that
breaks (a dropped connection, a body cut mid-event) into a classified
``TransportFailure``.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Protocol

from seamline.errors import TransportFailure

__all__ = ["ByteSource", "SseEvent", "SseParser", "read_sse"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its type (``message`` unless named), data, last id, retry."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SseParser:
    """Feed bytes, get whole events; keeps a partial line and a partial event between feeds."""

    __slots__ = ("_buffer", "_data", "_decoder", "_event", "_last_id", "_pending_cr", "_retry")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending_cr = False
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None

    @property
    def has_partial(self) -> bool:
        """Whether an event was begun and not dispatched (the stream ended mid-event)."""
        return bool(self._data or self._buffer or self._event)

    def feed(self, chunk: bytes) -> Iterator[SseEvent]:
        text = self._decoder.decode(chunk)
        if not text:
            return
        if self._pending_cr:
            self._pending_cr = False
            if text.startswith("\n"):
                text = text[1:]  # the LF of a CRLF split across chunks
        text = self._buffer + text
        start = 0
        length = len(text)
        while True:
            cr = text.find("\r", start)
            lf = text.find("\n", start)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < length:
                    nxt = cr + 2 if text[cr + 1] == "\n" else cr + 1
                else:
                    nxt = cr + 1
                    self._pending_cr = True
            event = self._line(text[start:end])
            if event is not None:
                yield event
            start = nxt
        self._buffer = text[start:]

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SseEvent(
            data="\n".join(self._data), event=self._event or "message", id=self._last_id, retry=self._retry
        )
        self._data = []
        self._event = ""
        return event


class ByteSource(Protocol):
    """What :func:`read_sse` reads: an HTTP response's body in chunks (httpx-style)."""

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...


async def read_sse(response: ByteSource, *, what: str = "the event stream") -> AsyncIterator[SseEvent]:
    """The events of ``response``; a connection that breaks raises ``TransportFailure``.

    A clean end of the body ends the iteration (a partial last event is reported as a
    break: the server never finished it).
    """
    parser = SseParser()
    try:
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                yield event
    except TransportFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - httpx's read and protocol errors, a reset socket
        raise TransportFailure(f"{what} broke: {type(exc).__name__}: {exc}") from None
    if parser.has_partial:
        raise TransportFailure(f"{what} ended in the middle of an event")
