"""Handoffs: a session continued on another backend (``run --session ID --provider P``).

The session keeps one id, one transcript and one cost ledger; each switch is recorded in
its metadata under ``handoffs``, oldest first: which provider and model it left, which one
took it, after which turn and at which transcript message. The ledger's rows carry their
turn, so :func:`backend_spans` splits the session's figures by the backend that spent them.

A failover's switch (:mod:`seamline.providers.failover`) also has ``reason`` (the failed
turn's error kind), ``message`` and ``failover: true``; its ``after_turn`` is the turn before
the failed one, because the new backend answers that turn: the turn's ledger rows, the
failed attempt's included, count under it.

>>> from seamline.sessions.records import UsageRow
>>> row = lambda turn, cost: UsageRow("s", turn, 10, 5, 0, 0, cost, True, None)
>>> handoffs = [{"from": "claude-code", "from_model": None, "to": "codex", "to_model": None, "after_turn": 1}]
>>> [(s.provider, s.turns, s.totals.cost_usd) for s in backend_spans("codex", None, handoffs,
...     [row(1, 0.5), row(2, 0.25)])]
[('claude-code', (1, 1), 0.5), ('codex', (2, None), 0.25)]
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seamline.sessions.records import SessionRecord, Totals, TranscriptEntry, UsageRow

__all__ = ["BackendSpan", "backend_spans", "handoff_entry", "handoffs_of"]


def handoff_entry(
    record: SessionRecord, transcript: Sequence[TranscriptEntry], *, provider: str, model: str | None
) -> dict[str, Any]:
    """The record of one switch of ``record`` to ``provider``: what it left, after which turn
    and at which message (the new backend's first message is ``at_message``)."""
    return {
        "from": record.provider,
        "from_model": record.model,
        "to": provider,
        "to_model": model,
        "after_turn": max((e.turn for e in transcript), default=0),
        "at_message": len(transcript),
        "at": round(time.time(), 3),
    }


def handoffs_of(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The session's handoffs, oldest first (none for a session that never switched)."""
    found = metadata.get("handoffs")
    return [dict(h) for h in found if isinstance(h, Mapping)] if isinstance(found, list) else []


@dataclass(frozen=True, slots=True)
class BackendSpan:
    """The turns one backend ran in a session (``turns``: first and last, ``None`` while it
    still holds the session) and what it spent."""

    provider: str
    model: str | None
    turns: tuple[int, int | None]
    totals: Totals


def backend_spans(
    provider: str, model: str | None, handoffs: Sequence[Mapping[str, Any]], usage: Sequence[UsageRow]
) -> list[BackendSpan]:
    """The session's figures split by backend, oldest first; ``provider`` and ``model`` are
    the session's current ones (those of the last span)."""
    bounds: list[tuple[str, str | None, int, int | None]] = []
    first = 1
    for h in handoffs:
        last = int(h.get("after_turn") or 0)
        bounds.append((str(h.get("from")), h.get("from_model"), first, last))
        first = last + 1
    bounds.append((provider, model, first, None))
    spans = []
    for name, used_model, lo, hi in bounds:
        if hi is not None and hi < lo:
            continue  # a backend that answered no turn (it failed over on its first; see failover)
        rows = [u for u in usage if u.turn >= lo and (hi is None or u.turn <= hi)]
        spans.append(BackendSpan(name, used_model, (lo, hi), _totals(rows)))
    return spans


def _totals(rows: Sequence[UsageRow]) -> Totals:
    priced = [r for r in rows if r.priced]
    return Totals(
        sessions=1,
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cache_read_tokens=sum(r.cache_read_tokens for r in rows),
        cache_write_tokens=sum(r.cache_write_tokens for r in rows),
        cost_usd=sum((r.cost_usd or 0.0 for r in priced), 0.0),
        priced=len(priced),
        unpriced=len(rows) - len(priced),
    )
