"""Finding traces: every trace in a traces folder, and a run named by a short id.

``seamline sessions list`` and ``seamline trace list`` print ids cut to 12 characters;
any unique prefix of at least four characters names a run, as it names a session.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from seamline.errors import InvalidRequest
from seamline.trace.records import PlainRecord, decode_plain, split_line

__all__ = ["MIN_PREFIX", "TraceEntry", "header_run_id", "list_traces", "resolve_prefix", "trace_ids"]

MIN_PREFIX: Final = 4
_SUFFIX: Final = ".jsonl"
_HEAD_BYTES: Final = 1 << 20
_TAIL_BYTES: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One trace file, read only at its two ends (its first and last record)."""

    run_id: str
    path: Path
    modified: float
    pipeline: str | None
    outcome: str | None
    stop_reason: str | None


def resolve_prefix(given: str, candidates: Iterable[str], *, what: str) -> str | None:
    """The one candidate ``given`` names: itself, or the only one it is a prefix of;
    ``None`` when it names none. An ambiguous or too short prefix is an error."""
    names = list(candidates)
    if given in names:
        return given
    matches = [n for n in names if n.startswith(given)]
    if len(matches) > 1:
        shown = ", ".join(sorted(m[:12] for m in matches)[:5])
        raise InvalidRequest(f"{what} id {given!r} is ambiguous ({shown}…); give more of it")
    if len(matches) == 1 and len(given) >= MIN_PREFIX:
        return matches[0]
    if matches:
        raise InvalidRequest(f"{what} id {given!r} is too short; give at least {MIN_PREFIX} characters")
    return None


def list_traces(folder: Path) -> list[TraceEntry]:
    """Every ``*.jsonl`` trace in ``folder``, newest first."""
    entries: list[TraceEntry] = []
    try:
        found = [p for p in folder.iterdir() if p.name.endswith(_SUFFIX)]
    except OSError:
        return []
    for path in found:
        try:
            entries.append(_entry(path))
        except OSError:
            continue
    entries.sort(key=lambda e: e.modified, reverse=True)
    return entries


def trace_ids(folder: Path) -> list[str]:
    try:
        return [p.name[: -len(_SUFFIX)] for p in folder.iterdir() if p.name.endswith(_SUFFIX)]
    except OSError:
        return []


def header_run_id(path: Path) -> str | None:
    """The run id the trace's first record (its header) names, read from that line only."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEAD_BYTES).split(b"\n", 1)[0]
    except OSError:
        return None
    first = _record(head)
    run_id = first.o.get("run_id") if first is not None else None
    return run_id if isinstance(run_id, str) else None


def _entry(path: Path) -> TraceEntry:
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        modified = os.fstat(fh.fileno()).st_mtime
        head = fh.read(_HEAD_BYTES).split(b"\n", 1)[0]
        fh.seek(max(0, size - _TAIL_BYTES))
        tail = fh.read().rstrip(b"\r\n").rsplit(b"\n", 1)[-1]
    first, last = _record(head), _record(tail)
    end_d = last.d if last is not None and last.kind == "run_end" else {}
    first_d = first.d if first is not None else {}
    return TraceEntry(
        run_id=path.name[: -len(_SUFFIX)],
        path=path,
        modified=modified,
        pipeline=_text(first_d.get("pipeline")),
        outcome=_text(end_d.get("outcome")),
        stop_reason=_text(end_d.get("stop_reason")),
    )


def _record(line: bytes) -> PlainRecord | None:
    """One record read plain (a listing shows what a damaged trace still says), or None."""
    parts = split_line(line.rstrip(b"\r").removeprefix(b"\xef\xbb\xbf"))
    if parts is None:
        return None
    try:
        return decode_plain(parts[1])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _text(value: object) -> str | None:
    return str(value) if value is not None else None
