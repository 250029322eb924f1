"""Replay.

:func:`replay` rebuilds a run's result from its trace alone (the final text from the last
accepted output, the transitions, the decisions, usage per role and phase) and checks it
against what the run recorded at its end. It never calls a provider.

Re-drive, which runs the controller again, is :func:`seamline.pipeline.redrive.redrive`:
the trace knows nothing of the controller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from seamline.errors import InvalidRequest
from seamline.events import Outcome
from seamline.trace.schema import (
    DecisionRecord,
    RecordedUsage,
    RoleEndRecord,
    RunEndRecord,
    TransitionRecord,
)
from seamline.trace.verify import Verification, gc_paused, verify_trace

__all__ = ["ReplayResult", "checked_trace", "replay"]


@dataclass
class ReplayResult:
    """A run's result as rebuilt from its trace."""

    run_id: str | None
    pipeline: str
    outcome: Outcome
    stop_reason: str
    text: str
    transitions: list[tuple[str, str]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    usage_by_role: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage_by_phase: dict[str, dict[str, Any]] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)

    def data(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason,
            "text": self.text,
            "transitions": [list(t) for t in self.transitions],
            "decisions": self.decisions,
            "usage_by_role": self.usage_by_role,
            "usage_by_phase": self.usage_by_phase,
            "mismatches": self.mismatches,
        }


_STOP_OUTCOME: Final[dict[str, Outcome]] = {
    "converged": "completed",
    "completed": "completed",
    "oscillating": "failed",
    "exhausted": "failed",
    "failed": "failed",
    "budget": "budget",
    "vetoed": "aborted",
    "invalid_transition": "aborted",
    "cancelled": "aborted",
}


def checked_trace(source: str | os.PathLike[str] | bytes | Verification) -> Verification:
    """The verification of ``source``; a trace that does not verify is refused, naming its first problem."""
    verification = source if isinstance(source, Verification) else verify_trace(source)
    if not verification.ok:
        first = verification.problems[0]
        raise InvalidRequest(f"trace does not verify: {first} ({len(verification.problems)} problem(s))")
    return verification


def _add(into: dict[str, dict[str, Any]], key: str, usage: RecordedUsage) -> None:
    slot = into.setdefault(key, {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "priced": True})
    slot["input_tokens"] += usage.input_tokens
    slot["output_tokens"] += usage.output_tokens
    slot["cost_usd"] = round(slot["cost_usd"] + float(usage.cost_usd), 9)
    slot["priced"] = slot["priced"] and usage.priced


def replay(source: str | os.PathLike[str] | bytes | Verification) -> ReplayResult:
    """Rebuild the result of a verified trace without calling any provider."""
    verification = checked_trace(source)
    with gc_paused():
        return _rebuild(verification)


def _rebuild(verification: Verification) -> ReplayResult:
    records = verification.typed_records
    header = verification.header_data
    assert header is not None  # a verified trace starts with its header
    judges = {p["name"] for p in header.definition["phases"] if p.get("judge")}
    text = ""
    transitions: list[tuple[str, str]] = []
    decisions: list[dict[str, Any]] = []
    by_role: dict[str, dict[str, Any]] = {}
    by_phase: dict[str, dict[str, Any]] = {}
    stop_reason = "completed"
    for rec in records:
        match rec:
            case RoleEndRecord(d=d):
                _add(by_role, d.role, d.usage)
                _add(by_phase, d.phase, d.usage)
                if d.status == "ok" and d.phase not in judges and d.output:
                    text = d.output.text
            case DecisionRecord(d=d):
                decisions.append(msgspec.to_builtins(d.decision))
            case TransitionRecord(d=d):
                transitions.append((d.from_, d.to))
                if d.reason != "next":
                    stop_reason = d.reason
            case _:
                pass  # the other kinds add nothing to the result
    if stop_reason == "completed" and any(dec["status"] == "converged" for dec in decisions):
        stop_reason = "converged"
    result = ReplayResult(
        run_id=verification.run_id,
        pipeline=header.pipeline,
        outcome=_STOP_OUTCOME.get(stop_reason, "failed"),
        stop_reason=stop_reason,
        text=text,
        transitions=transitions,
        decisions=decisions,
        usage_by_role=by_role,
        usage_by_phase=by_phase,
    )
    end = records[-1]
    assert isinstance(end, RunEndRecord)  # a verified trace ends with run_end
    said = msgspec.to_builtins(end.d)
    for name in ("outcome", "stop_reason", "text"):
        if said.get(name) != getattr(result, name):
            result.mismatches.append(
                f"{name}: the evidence gives {getattr(result, name)!r}, run_end says {said.get(name)!r}"
            )
    return result
