"""Replay.

:func:`replay` rebuilds a run's result from its trace alone (the final text from the last
accepted output, the transitions, the decisions, usage per role and phase) and checks it
against what the run recorded at its end. It never calls a provider.

Re-drive, which runs the controller again, is :func:`seamline.pipeline.redrive.redrive`:
the trace knows nothing of the controller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seamline.errors import InvalidRequest
from seamline.trace.records import TraceRecord
from seamline.trace.verify import Verification, gc_paused, verify_trace

__all__ = ["ReplayResult", "checked_trace", "replay"]


@dataclass
class ReplayResult:
    """A run's result as rebuilt from its trace."""

    run_id: str | None
    pipeline: str
    outcome: str
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


_STOP_OUTCOME = {
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


def _add(into: dict[str, dict[str, Any]], key: str, usage: Mapping[str, Any]) -> None:
    slot = into.setdefault(key, {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "priced": True})
    slot["input_tokens"] += int(usage.get("input_tokens", 0))
    slot["output_tokens"] += int(usage.get("output_tokens", 0))
    slot["cost_usd"] = round(slot["cost_usd"] + float(usage.get("cost_usd") or 0.0), 9)
    slot["priced"] = slot["priced"] and bool(usage.get("priced", True))


def replay(source: str | os.PathLike[str] | bytes | Verification) -> ReplayResult:
    """Rebuild the result of a verified trace without calling any provider."""
    verification = checked_trace(source)
    with gc_paused():
        return _rebuild(verification)


def _rebuild(verification: Verification) -> ReplayResult:
    records = verification.records
    judges = {p["name"] for p in verification.header["definition"]["phases"] if p.get("judge")}
    text = ""
    transitions: list[tuple[str, str]] = []
    decisions: list[dict[str, Any]] = []
    by_role: dict[str, dict[str, Any]] = {}
    by_phase: dict[str, dict[str, Any]] = {}
    stop_reason = "completed"
    end: TraceRecord = records[-1]
    for rec in records:
        d = rec.d
        if rec.kind == "role_end":
            _add(by_role, d["role"], d.get("usage", {}))
            _add(by_phase, d["phase"], d.get("usage", {}))
            if d.get("status") == "ok" and d["phase"] not in judges:
                text = str(d["output"].get("text", ""))
        elif rec.kind == "decision":
            decisions.append(d["decision"])
        elif rec.kind == "transition":
            transitions.append((d["from"], d["to"]))
            if d.get("reason", "next") != "next":
                stop_reason = str(d["reason"])
    if stop_reason == "completed" and any(dec["status"] == "converged" for dec in decisions):
        stop_reason = "converged"
    result = ReplayResult(
        run_id=verification.run_id,
        pipeline=str(verification.header.get("pipeline")),
        outcome=_STOP_OUTCOME.get(stop_reason, "failed"),
        stop_reason=stop_reason,
        text=text,
        transitions=transitions,
        decisions=decisions,
        usage_by_role=by_role,
        usage_by_phase=by_phase,
    )
    for name in ("outcome", "stop_reason", "text"):
        if end.d.get(name) != getattr(result, name):
            result.mismatches.append(
                f"{name}: the evidence gives {getattr(result, name)!r}, run_end says {end.d.get(name)!r}"
            )
    return result
