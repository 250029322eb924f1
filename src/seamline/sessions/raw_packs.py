"""Packs of the raw log: a turn's events written as one row instead of one row each.

A run of queued raw rows that follow each other in one session (consecutive ``seq``, one
turn, direction ``out``, source ``event``) is written as one ``raw_log`` row:

- ``seq``, ``turn``, ``direction``, ``source`` and ``created_at`` are those of its first row;
- ``packed`` is how many rows it holds (1 for a plain row);
- ``payload`` is the JSON array of their events, ``[event,event,…]`` (the events are the
  event encoder's JSON, so the array is JSON too: ``json_each(payload)`` reads it by hand);
- ``pack_index`` is ``LENGTHS;OFFSETS``: each event's length in characters, so that its
  text comes back exactly as it was written, and each one's time after ``created_at`` in
  microseconds.

Only events are packed: a prompt, a history record or an agent CLI's raw line keeps its own
row, whatever its text (a line need not be JSON). Readers go through :func:`unpacked`, which
gives back one row per event, each with its own ``seq`` and time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

RAW_COLUMNS: Final = "skey, seq, turn, direction, source, payload, created_at, packed, pack_index"
RAW_INSERT: Final = f"INSERT INTO raw_log ({RAW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
RAW_SELECT: Final = "SELECT seq, turn, direction, source, payload, created_at, packed, pack_index FROM raw_log"
LAST_SEQ: Final = "SELECT seq + packed - 1 FROM raw_log WHERE skey = ? ORDER BY seq DESC LIMIT 1"
"""The session's last raw ``seq`` (packs never overlap: the last row holds the last one)."""

QueuedRow = tuple[str, int, int, str, str, str, float]
"""A queued raw row: session id, seq, turn, direction, source, payload, time."""


def packed_rows(rows: Sequence[QueuedRow], skey_of: Callable[[str], str]) -> list[tuple[Any, ...]]:
    """Queued rows as ``raw_log`` rows (:data:`RAW_INSERT`'s parameters), runs of one
    session's events packed, each session's storage key asked of ``skey_of`` once."""
    skeys: dict[str, str] = {}
    out: list[tuple[Any, ...]] = []
    n = len(rows)
    i = 0
    while i < n:
        sid, seq, turn, direction, source, payload, created_at = rows[i]
        skey = skeys.get(sid)
        if skey is None:
            skey = skeys[sid] = skey_of(sid)
        j = i + 1
        if source == "event" and direction == "out":
            while j < n:
                nxt = rows[j]
                if nxt[0] != sid or nxt[1] != seq + (j - i) or nxt[2] != turn or nxt[4] != "event" or nxt[3] != "out":
                    break
                j += 1
        if j - i == 1:
            out.append((skey, seq, turn, direction, source, payload, created_at, 1, None))
        else:
            run = rows[i:j]
            texts = [r[5] for r in run]
            index = ",".join([str(len(t)) for t in texts]) + ";" + ",".join([_offset(r[6], created_at) for r in run])
            out.append((skey, seq, turn, direction, source, "[" + ",".join(texts) + "]", created_at, j - i, index))
        i = j
    return out


def _offset(at: float, start: float) -> str:
    return str(round((at - start) * 1_000_000))


def unpacked(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[int, int, str, str, str, float]]:
    """``raw_log`` rows as :data:`RAW_SELECT` reads them, one row per raw row: (seq, turn,
    direction, source, payload, created_at). A pack whose index does not match its payload
    (a row edited by hand) comes back as the one row it is, not as made-up events."""
    for seq, turn, direction, source, payload, created_at, packed, index in rows:
        parts = _split(payload, packed, index) if packed and packed > 1 else None
        if parts is None:
            yield seq, turn, direction, source, payload, created_at
            continue
        for k, (text, offset) in enumerate(parts):
            yield seq + k, turn, direction, source, text, created_at + offset / 1_000_000


def _split(payload: str, packed: int, index: str | None) -> list[tuple[str, int]] | None:
    try:
        lengths_text, offsets_text = (index or "").split(";")
        lengths = [int(x) for x in lengths_text.split(",")]
        offsets = [int(x) for x in offsets_text.split(",")]
    except ValueError:
        return None
    if len(lengths) != packed or len(offsets) != packed or min(lengths) < 0:
        return None
    if sum(lengths) + packed + 1 != len(payload) or payload[0] != "[" or payload[-1] != "]":
        return None
    parts: list[tuple[str, int]] = []
    at = 1
    for length, offset in zip(lengths, offsets, strict=True):
        if payload[at + length] not in ",]":  # not where the index says an event ends
            return None
        parts.append((payload[at : at + length], offset))
        at += length + 1
    return parts


def covered_seqs(spans: Iterable[tuple[int, int]]) -> Callable[[int], bool]:
    """Whether a ``seq`` is already in the store, given the (seq, packed) of its rows."""
    ranges = sorted(spans)
    starts = [first for first, _ in ranges]

    def covered(seq: int) -> bool:
        k = bisect_right(starts, seq)  # the last row that starts at or before seq
        return k > 0 and seq < ranges[k - 1][0] + ranges[k - 1][1]

    return covered
