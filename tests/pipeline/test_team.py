"""Budgets and teams: the spawn guard enforces caps live across a team; the bus."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.errors import BudgetExceeded, InvalidRequest, PermissionDenied
from seamline.events import Complete, Usage
from seamline.pipeline import definition_from_data, resolve_pipeline
from seamline.pipeline.bus import AgentBus
from seamline.pipeline.guard import SpawnGuard
from seamline.trace.verify import verify_trace

from .support import make_workspace, read_then_answer, run_pipeline, scripted_writer


def test_scripted_run_priced_above_its_cap_stops_at_the_cap(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    script = [*read_then_answer("never reached\n", cost=0.01), {"text": "extra", "usage": {"cost_usd": 0.01}}]
    writer = scripted_writer(script)
    controller, events = run_pipeline(resolve_pipeline("single"), "q", workspace=ws, provider=writer, budget_usd=0.015)
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("budget", "budget")
    assert controller.report.exit_code == 3
    assert writer.position == 2  # the second priced call crossed the cap; nothing ran after it
    verification = verify_trace(controller.writer.data())
    assert verification.ok, verification.problems
    guard = [r for r in verification.records if r.kind == "guard"]
    assert len(guard) == 1
    where = guard[0].d
    assert (where["phase"], where["role"], where["limit"], where["cap"]) == ("answer", "agent", "cost", 0.015)
    crossing = verification.records[where["at_seq"]]
    assert crossing.kind == "event" and crossing.d["event"]["type"] == "usage"
    assert crossing.d["event"]["cost_usd"] == 0.01 and where["spent"] == pytest.approx(0.02)
    end = verification.records[-1].d
    assert end["outcome"] == "budget" and end["usage"]["total"]["cost_usd"] == pytest.approx(0.02)
    assert end["usage"]["by_role"]["agent"]["cost_usd"] == pytest.approx(0.02)


TEAM = {
    "name": "pair",
    "phases": [{"name": "draft", "roles": ["left", "right"], "next": "done"}],
    "transitions": {"draft": ["done"]},
    "roles": {"left": {"kind": "agent"}, "right": {"kind": "agent"}},
    "team": {"max_parallel": 2, "max_cost_usd": 0.025},
}


def _slow_priced(n: int) -> list[dict[str, object]]:
    return [{"text": f"part {i}", "delay": 0.01, "usage": {"input_tokens": 5, "cost_usd": 0.01}} for i in range(n)]


def test_team_cost_cap_is_enforced_across_parallel_tasks(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    # Each role alone would spend 0.03 over three calls; together they pass the 0.025 cap
    # in their second round of calls, and neither makes its third.
    tool_step = {"tool_calls": [{"name": "list_dir", "arguments": {}}], **_slow_priced(1)[0]}
    left = scripted_writer([tool_step, tool_step, *_slow_priced(1)])
    right = scripted_writer([tool_step, tool_step, *_slow_priced(1)])
    controller, events = run_pipeline(
        definition_from_data(TEAM), "q", workspace=ws, providers={"left": left, "right": right}
    )
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "budget"
    verification = verify_trace(controller.writer.data())
    assert verification.ok, verification.problems
    starts = [r.d["role"] for r in verification.records if r.kind == "role_start"]
    assert sorted(starts) == ["left", "right"]
    guard = [r.d for r in verification.records if r.kind == "guard"]
    assert len(guard) == 1 and guard[0]["spent"] > 0.025
    assert left.position <= 2 and right.position <= 2  # the stop came while the team was still working


def test_task_limit_refuses_a_spawn(tmp_path: Path) -> None:
    data = {**TEAM, "team": {"max_tasks": 1}}
    left, right = scripted_writer(_slow_priced(1)), scripted_writer(_slow_priced(1))
    controller, _events = run_pipeline(
        definition_from_data(data), "q", workspace=make_workspace(tmp_path), providers={"left": left, "right": right}
    )
    assert controller.report.outcome == "budget"
    assert "already ran its 1 task" in verify_trace(controller.writer.data()).records[-1].d["detail"]


def test_guard_limits() -> None:
    guard = SpawnGuard(max_depth=1, max_tasks=2, max_tokens=10)
    guard.admit(depth=1)
    with pytest.raises(InvalidRequest, match="nesting limit"):
        guard.admit(depth=2)
    guard.admit(depth=1)
    with pytest.raises(BudgetExceeded, match="2 task"):
        guard.admit(depth=1)
    assert guard.charge(Usage(input_tokens=4, output_tokens=4)) is None
    stop = guard.charge(Usage(input_tokens=4))
    assert stop is not None and stop.limit == "tokens" and guard.unpriced == 2


def test_bus_messages_reports_cancel_and_owned_context() -> None:
    async def scenario() -> None:
        bus = AgentBus(guard=SpawnGuard(max_parallel=1))
        order: list[str] = []

        async def work(name: str, pause: float) -> str:
            order.append(f"start {name}")
            await asyncio.sleep(pause)
            order.append(f"end {name}")
            return name.upper()

        a = bus.submit("a", lambda: work("a", 0.01))
        b = bus.submit("b", lambda: work("b", 0))
        c = bus.submit("c", lambda: work("c", 10))
        await asyncio.sleep(0.05)
        assert bus.cancel(c.task_id)
        results = await bus.collect([a, b, c])
        assert results[:2] == ["A", "B"] and isinstance(results[2], asyncio.CancelledError)
        assert order[:4] == ["start a", "end a", "start b", "end b"]  # max_parallel=1 serialises
        bus.post(from_agent="a", to_agent="b", message_type="note", payload=1)
        bus.post(from_agent="a", to_agent="*", message_type="note", payload=2)
        bus.post(from_agent="b", to_agent="a", message_type="note", payload=3)
        assert [m.payload for m in bus.inbox("b")] == [1, 2]
        assert [m.seq for m in bus.inbox("b", after=1)] == [2]
        bus.publish("answer", "x", owner="writer")
        bus.publish("answer", "y", owner="writer")
        with pytest.raises(PermissionDenied, match="belongs to writer"):
            bus.publish("answer", "z", owner="reviewer")
        assert bus.shared("answer") == "y"

    asyncio.run(scenario())
