"""A pipeline with a parallel phase: each role's chat and tool spans land under that role's
turn, and the workflow's totals are the sum of every turn (live and rebuilt alike)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from seamline.events import Event
from seamline.live import open_run
from seamline.pipeline import resolve_pipeline
from seamline.pipeline.builtin import stream_pipeline
from seamline.telemetry.live import spans_of_trace, tap_pipeline
from tests.telemetry.support import MemorySink

ROLES = ("alpha", "beta", "gamma")


def _script(tmp: Path, role: str, *, fail: bool = False) -> Path:
    # Every role's tool call has the same call id (the scripted provider numbers them per
    # session): only the role's turn tells them apart.
    first: dict[str, Any] = {
        "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001},
    }
    last: dict[str, Any] = {"text": f"answer of {role}", "usage": {"input_tokens": 12, "output_tokens": 7}}
    if fail:
        last = {"error": {"kind": "rate_limit", "message": "slow down", "retryable": False}}
    path = tmp / f"{role}.json"
    path.write_text(json.dumps([first, last]))
    return path


def fan_out(tmp: Path, *, failing: str | None = None) -> Path:
    bindings = {
        role: {
            "kind": "agent",
            "provider": "scripted",
            "options": {"script": str(_script(tmp, role, fail=role == failing))},
        }
        for role in (*ROLES, "summary")
    }
    definition = {
        "name": "fan-out",
        "phases": [
            {"name": "fan", "roles": list(ROLES), "next": "sum"},
            {"name": "sum", "role": "summary", "next": "done"},
        ],
        "transitions": {"fan": ["sum"], "sum": ["done"]},
        "roles": bindings,
        "team": {"max_parallel": len(ROLES)},
    }
    path = tmp / "fan-out.json"
    path.write_text(json.dumps(definition))
    return path


def live_run(tmp: Path, run_id: str, *, failing: str | None = None) -> tuple[MemorySink, Path]:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("some notes\n")
    trace = tmp / "traces" / f"{run_id}.jsonl"
    controller = open_run(
        resolve_pipeline(str(fan_out(tmp, failing=failing))), workspace=ws, trace_file=trace, run_id=run_id
    )
    sink = MemorySink()

    async def drive() -> list[Event]:
        return [e async for e in tap_pipeline(controller, stream_pipeline(controller, "go"), sink)]

    asyncio.run(drive())
    return sink, trace


def _interleaved(trace: Path) -> bool:
    """Whether the roles' events interleave in the trace (what the one-open-turn builder lost)."""
    roles = [
        r["d"].get("role")
        for r in (json.loads(line)["r"] for line in trace.read_text().splitlines())
        if r["kind"] in ("role_start", "event", "role_end") and r["d"].get("role") in ROLES
    ]
    runs = [role for i, role in enumerate(roles) if i == 0 or roles[i - 1] != role]
    return len(runs) > len(ROLES)


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def check_tree(spans: list[ReadableSpan]) -> None:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    roots = [s for s in spans if s.parent is None]
    assert [s.name for s in roots] == ["invoke_workflow fan-out"]
    root = roots[0]
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1
    turns = {
        _attrs(s)["gen_ai.agent.name"]: s
        for s in spans
        if s.parent is not None and s.parent.span_id == root.context.span_id
    }
    assert sorted(turns) == sorted([*ROLES, "summary"])
    for role, turn in turns.items():
        assert turn.name == f"invoke_agent {role}"
        children = [s for s in spans if s.parent is not None and s.parent.span_id == turn.context.span_id]
        assert sorted(s.name for s in children) == ["chat scripted", "chat scripted", "execute_tool read_file"], role
        assert _attrs(turn)["gen_ai.usage.input_tokens"] == 22 and _attrs(turn)["gen_ai.usage.output_tokens"] == 12
    for span in spans:  # nothing hangs off a span of another tree, nothing is orphaned
        assert span.parent is None or span.parent.span_id in by_id
    assert _attrs(root)["gen_ai.usage.input_tokens"] == 88 and _attrs(root)["gen_ai.usage.output_tokens"] == 48


def test_a_parallel_phase_gives_each_role_its_own_spans_and_the_right_totals(tmp_path: Path) -> None:
    sink, trace = live_run(tmp_path, "run-fan")
    assert _interleaved(trace)  # the case at hand: records of the three roles mixed
    check_tree(sink.spans())
    again = MemorySink()
    again.emit(spans_of_trace(trace))
    again.close()
    check_tree(again.spans())
