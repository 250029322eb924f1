"""Just enough HTTP/1.1 for a relay: a message head, and a body carried as it arrives.

The gateway does not parse what it relays beyond what framing needs: the head (a start
line and header fields, at most :data:`HEAD_LIMIT` bytes) and where the body ends
(``Content-Length``, ``Transfer-Encoding: chunked``, or the end of the connection). The body
is written on as each piece arrives, so a streamed answer (SSE over chunked HTTP) reaches
the client as the upstream sends it; a ``tap`` sees the payload bytes (chunk framing
removed) for the meter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = ["HEAD_LIMIT", "BadMessage", "BodyWriter", "Head", "carry_body", "read_head"]

HEAD_LIMIT: Final = 64 * 1024
_PIECE: Final = 1 << 16


class BodyWriter(Protocol):
    """Where a body goes: a stream writer, or a sink that drops it."""

    def write(self, data: bytes, /) -> None: ...
    async def drain(self) -> None: ...


class BadMessage(Exception):
    """The peer sent something that is not an HTTP/1.1 message this relay can frame."""


@dataclass(frozen=True, slots=True)
class Head:
    """A start line and its header fields, in order, names as sent."""

    start: str
    fields: tuple[tuple[str, str], ...]

    def get(self, name: str) -> str | None:
        wanted = name.lower()
        for key, value in self.fields:
            if key.lower() == wanted:
                return value
        return None

    def replaced(self, changes: dict[str, str | None]) -> Head:
        """The head with each named field set (``None``: removed); names are matched
        case-insensitively, a new field is added at the end."""
        lowered = {k.lower(): v for k, v in changes.items()}
        kept = [(k, v) for k, v in self.fields if k.lower() not in lowered]
        kept += [(k, v) for k, v in changes.items() if v is not None]
        return Head(self.start, tuple(kept))

    def with_start(self, start: str) -> Head:
        return Head(start, self.fields)

    def encode(self) -> bytes:
        lines = [self.start, *(f"{k}: {v}" for k, v in self.fields)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    @property
    def chunked(self) -> bool:
        return "chunked" in (self.get("transfer-encoding") or "").lower()

    def length(self) -> int | None:
        value = self.get("content-length")
        if value is None:
            return None
        if not value.strip().isdigit():
            raise BadMessage(f"bad Content-Length {value!r}")
        return int(value)


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next message head, or ``None`` when the peer closed before sending one."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadMessage("the connection closed inside a message head") from None
    except asyncio.LimitOverrunError:
        raise BadMessage(f"a message head longer than {HEAD_LIMIT} bytes") from None
    text = raw[:-4].decode("latin-1")
    start, *lines = text.split("\r\n")
    fields: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadMessage(f"a malformed header line {line[:80]!r}")
        fields.append((name, value.strip()))
    return Head(start, tuple(fields))


async def carry_body(
    head: Head,
    reader: asyncio.StreamReader,
    writer: BodyWriter,
    *,
    until_close: bool,
    tap: Callable[[bytes], None] | None = None,
) -> None:
    """Copy the body that ``head`` frames from ``reader`` to ``writer`` as it arrives.

    ``until_close``: a body with neither length nor chunking runs to the end of the
    connection (a response); otherwise it is empty (a request)."""
    if head.chunked:
        await _carry_chunked(reader, writer, tap)
        return
    length = head.length()
    if length is None and not until_close:
        return
    left = length
    while left is None or left > 0:
        piece = await reader.read(_PIECE if left is None else min(_PIECE, left))
        if not piece:
            if left is None:
                return
            raise BadMessage(f"the body ended {left} bytes short")
        if left is not None:
            left -= len(piece)
        writer.write(piece)
        if tap is not None:
            tap(piece)
        await writer.drain()


async def _carry_chunked(reader: asyncio.StreamReader, writer: BodyWriter, tap: Callable[[bytes], None] | None) -> None:
    while True:
        try:
            size_line = await reader.readuntil(b"\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise BadMessage("the chunked body ended without its last chunk") from None
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadMessage(f"a bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            writer.write(size_line)
            while True:  # trailer fields, then the empty line
                try:
                    line = await reader.readuntil(b"\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    raise BadMessage("the chunked body ended inside its trailer") from None
                writer.write(line)
                if line == b"\r\n":
                    await writer.drain()
                    return
        try:
            data = await reader.readexactly(size + 2)
        except asyncio.IncompleteReadError:
            raise BadMessage("the chunked body ended inside a chunk") from None
        writer.write(size_line + data)  # one write: a chunk reaches the client in one piece
        if tap is not None:
            tap(data[:-2])
        await writer.drain()
