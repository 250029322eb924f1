"""The canonical transcript: derived from the raw log by one parser per source.

Each raw row names its source (``prompt``, ``event``, ``history``, or a provider's own
wire name). A :class:`TranscriptParser` registered for that source turns rows into
:class:`TranscriptEntry` items. Each derived entry carries its parser's name and version;
when a parser's version changes, a session is derived again the next time it is read.

The ``events`` parser covers every provider, because the base verbs log every event a
provider emits. A provider with a native wire may register a parser for its own source
that ``replaces_events`` in the turns where that source appears.

A turn sent again (a failover: the backend had no capacity, the next one took the session
and answered the same prompt) has several ``prompt`` rows; only its rows from the last one
on make the transcript, so the prompt is there once. The raw log keeps the failed attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

from seamline.sessions.records import RawRow, TranscriptEntry

__all__ = ["EventsTranscriptParser", "TranscriptParser", "derive_transcript", "parser_versions", "register_parser"]


@dataclass(frozen=True, slots=True)
class Draft:
    """An entry before it is numbered."""

    turn: int
    kind: str
    role: str
    content: str
    call_id: str | None
    data: dict[str, Any]
    raw_seq: int


class TranscriptParser(Protocol):
    name: ClassVar[str]
    version: ClassVar[int]
    sources: ClassVar[tuple[str, ...]]
    replaces_events: ClassVar[bool]

    def parse(self, row: RawRow) -> list[Draft]: ...


class EventsTranscriptParser:
    """Prompts, copied history and seamline events into messages.

    Version 2 records reasoning (``reasoning`` entries, role assistant): a turn's closed
    ``reasoning`` blocks, or, in a turn that has none (model APIs stream reasoning only as
    deltas), its coalesced ``reasoning_delta`` rows."""

    name: ClassVar[str] = "events"
    version: ClassVar[int] = 2
    sources: ClassVar[tuple[str, ...]] = ("prompt", "history", "event")
    replaces_events: ClassVar[bool] = False

    def parse(self, row: RawRow) -> list[Draft]:
        try:
            payload = json.loads(row.payload)
        except json.JSONDecodeError:
            return [Draft(row.turn, "note", "system", "unreadable raw row", None, {"source": row.source}, row.seq)]
        if row.source == "prompt":
            return [Draft(row.turn, "user", "user", str(payload), None, {}, row.seq)]
        if row.source == "history":
            entry = payload if isinstance(payload, dict) else {}
            return [
                Draft(
                    row.turn,
                    str(entry.get("kind", "note")),
                    str(entry.get("role", "system")),
                    str(entry.get("content", "")),
                    entry.get("call_id"),
                    dict(entry.get("data") or {}),
                    row.seq,
                )
            ]
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type")
        if kind == "text":
            return [Draft(row.turn, "assistant", "assistant", str(payload.get("text", "")), None, {}, row.seq)]
        if kind in ("reasoning", "reasoning_delta") and payload.get("text"):
            return [Draft(row.turn, str(kind), "assistant", str(payload["text"]), None, {}, row.seq)]
        if kind == "tool_call":
            data = {"name": payload.get("name"), "arguments": payload.get("arguments") or {}}
            return [Draft(row.turn, "tool_call", "assistant", "", payload.get("call_id"), data, row.seq)]
        if kind == "tool_result":
            data = {"name": payload.get("name"), "is_error": bool(payload.get("is_error"))}
            return [
                Draft(
                    row.turn,
                    "tool_result",
                    "tool",
                    str(payload.get("output", "")),
                    payload.get("call_id"),
                    data,
                    row.seq,
                )
            ]
        if kind == "complete" and payload.get("text"):
            # kept only when the turn had no text event of its own (see derive_transcript)
            return [Draft(row.turn, "final_text", "assistant", str(payload["text"]), None, {}, row.seq)]
        if kind == "file_change":
            data = {"path": payload.get("path"), "change": payload.get("kind")}
            return [Draft(row.turn, "file_change", "system", "", payload.get("call_id"), data, row.seq)]
        return []


_PARSERS: Final[dict[str, TranscriptParser]] = {}


def register_parser(parser: TranscriptParser) -> None:
    """Register a parser for its sources (a later registration for a source wins)."""
    for source in parser.sources:
        _PARSERS[source] = parser


register_parser(EventsTranscriptParser())


def parser_versions() -> dict[str, int]:
    """The current version of every registered parser, by name."""
    return {p.name: p.version for p in _PARSERS.values()}


# Drafts kept only where the turn lacks the closed kind, and what they stand for then.
_STANDS_FOR: Final = {"final_text": "assistant", "reasoning_delta": "reasoning"}


def _last_attempts(rows: Iterable[RawRow]) -> list[RawRow]:
    """The rows without those of a turn's attempts before its last prompt (a failover)."""
    rows = list(rows)
    last: dict[int, int] = {}
    prompts = 0
    for row in rows:
        if row.source == "prompt":
            prompts += 1
            last[row.turn] = row.seq
    if prompts == len(last):  # one prompt a turn: the common case, nothing to leave out
        return rows
    return [r for r in rows if r.seq >= last.get(r.turn, 0)]


def derive_transcript(rows: Iterable[RawRow]) -> list[TranscriptEntry]:
    """Derive the transcript of one session from its raw rows (in log order)."""
    rows = _last_attempts(rows)
    native_turns = {r.turn for r in rows if (p := _PARSERS.get(r.source)) is not None and p.replaces_events}
    drafts: list[tuple[Draft, TranscriptParser]] = []
    for row in rows:
        parser = _PARSERS.get(row.source)
        if parser is None:
            continue
        if row.source == "event" and row.turn in native_turns:
            continue
        drafts.extend((draft, parser) for draft in parser.parse(row))
    spoke = {d.turn for d, _ in drafts if d.kind == "assistant"}
    thought = {d.turn for d, _ in drafts if d.kind == "reasoning"}
    drafts = [
        (Draft(d.turn, _STANDS_FOR[d.kind], d.role, d.content, d.call_id, d.data, d.raw_seq), p)
        if d.kind in _STANDS_FOR
        else (d, p)
        for d, p in drafts
        if (d.kind != "final_text" or d.turn not in spoke) and (d.kind != "reasoning_delta" or d.turn not in thought)
    ]
    return [
        TranscriptEntry(
            index=i,
            turn=d.turn,
            kind=d.kind,
            role=d.role,
            content=d.content,
            call_id=d.call_id,
            data=d.data,
            raw_seq=d.raw_seq,
            parser=p.name,
            parser_version=p.version,
        )
        for i, (d, p) in enumerate(drafts)
    ]
