"""A run's event log: numbered batches from any point, heartbeats while idle, the end."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("ag_ui")

from seamline.events import Complete, Session, TextDelta
from seamline.server.runs import Run


def test_follow_reads_on_from_any_point_and_keeps_idle_readers_alive() -> None:
    async def scenario() -> list[tuple[int, list[str]]]:
        run = Run(id="r", session_id="s", prompt="p")
        run.append(Session(session_id="s", provider="scripted", model=None))
        run.append(TextDelta(text="a"))
        seen: list[tuple[int, list[str]]] = []

        async def reader() -> None:
            async for start, batch in run.follow(1, heartbeat=0.01):
                seen.append((start, [e.type for e in batch]))
                if not batch and len(seen) < 3:
                    continue
                if not batch:
                    run.append(TextDelta(text="b"))
                    run.append(Complete(outcome="completed", stop_reason="end_turn"))
                    run.finish("completed", "end_turn")

        await asyncio.wait_for(reader(), 10)
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == (1, ["text_delta"])  # after event 1: event 2 on
    assert seen[1:3] == [(2, []), (2, [])]  # heartbeats while nothing happens
    assert seen[3] == (2, ["text_delta", "complete"])  # what came at once, in one batch
    assert len(seen) == 4  # and the end


def test_the_summary_names_the_tool_called_until_its_result() -> None:
    from seamline.events import ToolCall, ToolResult

    run = Run(id="r", session_id="s", prompt="p")
    assert run.summary()["current_tool"] is None
    run.append(ToolCall(call_id="c1", name="write_file", arguments={"path": "a"}))
    assert run.summary()["current_tool"] == "write_file"
    run.append(TextDelta(text="meanwhile"))
    assert run.summary()["current_tool"] == "write_file"
    run.append(ToolResult(call_id="c1", output="ok"))
    assert run.summary()["current_tool"] is None
