"""Reasoning in the canonical transcript: a turn's closed reasoning blocks, or its streamed
deltas where it has none (model APIs send reasoning only as deltas), never both; the loop's
rebuilt conversation leaves reasoning out."""

from __future__ import annotations

import asyncio

from seamline.events import Event as SeamlineEvent
from seamline.events import Reasoning, ReasoningDelta, Text, encode_event
from seamline.providers.base import messages_from_transcript
from seamline.sessions.records import RawRow
from seamline.sessions.transcript import derive_transcript
from seamline.testing import scripted
from tests.sessions.conftest import StoreFactory


def rows(*turns: list[SeamlineEvent]) -> list[RawRow]:
    out: list[RawRow] = []
    for turn, events in enumerate(turns, 1):
        out.append(RawRow(len(out), "s", turn, "in", "prompt", f'"ask {turn}"'))
        out += [RawRow(len(out), "s", turn, "out", "event", encode_event(e).decode()) for e in events]
    return out


def test_reasoning_blocks_and_delta_only_turns_are_recorded_once() -> None:
    entries = derive_transcript(
        rows(
            # a CLI: deltas streamed (the raw log coalesces them into one row), then the block
            [ReasoningDelta(text="think hard"), Reasoning(text="think hard"), Text(text="A")],
            # a model API: deltas only, one block before the tool call and one after
            [ReasoningDelta(text="first"), Text(text="B"), ReasoningDelta(text="second"), Text(text="C")],
        )
    )
    assert [(e.turn, e.kind, e.content) for e in entries] == [
        (1, "user", "ask 1"),
        (1, "reasoning", "think hard"),
        (1, "assistant", "A"),
        (2, "user", "ask 2"),
        (2, "reasoning", "first"),
        (2, "assistant", "B"),
        (2, "reasoning", "second"),
        (2, "assistant", "C"),
    ]
    rebuilt = messages_from_transcript(entries)  # what a model is sent again: no reasoning
    assert [(m.role, m.content) for m in rebuilt] == [
        ("user", "ask 1"),
        ("assistant", "A"),
        ("user", "ask 2"),
        ("assistant", "BC"),
    ]


def test_a_stored_turn_keeps_its_reasoning(make_store: StoreFactory) -> None:
    store = make_store()

    async def go() -> str:
        session = await scripted([{"reasoning": "Plan: say hi.", "text": "hi"}]).open(store=store)
        async for _ in session.send("hello"):
            pass
        return session.session_id

    sid = asyncio.run(go())
    entries = store.transcript(sid)
    assert [(e.kind, e.role, e.content) for e in entries] == [
        ("user", "user", "hello"),
        ("reasoning", "assistant", "Plan: say hi."),
        ("assistant", "assistant", "hi"),
    ]
