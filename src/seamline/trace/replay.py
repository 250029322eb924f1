"""Replay and re-drive.

:func:`replay` rebuilds a run's result from its trace alone (the final text from the last
accepted output, the transitions, the decisions, usage per role and phase) and checks it
against what the run recorded at its end. It never calls a provider.

:func:`redrive` runs the controller again, on the recorded responses instead of
providers, and compares the transitions and decisions it reaches with the recorded ones.
A difference is reported by its cause: ``definition``, ``config``, ``model`` or
``prompt`` drift (and ``decision`` differences when none of those explains it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seamline.errors import InvalidRequest
from seamline.trace.records import TraceRecord
from seamline.trace.verify import Verification, gc_paused, verify_trace

__all__ = ["RedriveReport", "ReplayResult", "redrive", "replay"]


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


def _checked(source: str | os.PathLike[str] | bytes | Verification) -> Verification:
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
    verification = _checked(source)
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


@dataclass
class RedriveReport:
    """What a re-drive found: whether the controller reached the same end, and why not."""

    same: bool
    drift: dict[str, list[str]]
    differences: list[str]
    outcome: str
    stop_reason: str

    def data(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "drift": self.drift,
            "differences": self.differences,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason,
        }


def redrive(
    source: str | os.PathLike[str] | bytes | Verification,
    *,
    definition: Any = None,
    config: Mapping[str, Any] | None = None,
    identities: Mapping[str, Mapping[str, Any]] | None = None,
    role_kinds: Mapping[str, Callable[..., Any]] | None = None,
) -> RedriveReport:
    """Run the controller again against the recorded responses.

    ``definition`` (a :class:`~seamline.pipeline.definition.PipelineDefinition`),
    ``config`` and ``identities`` (provider identity per role) default to the recorded
    ones; give today's to see whether a change would alter the run."""
    from seamline.pipeline.agents import RecordedAgents
    from seamline.pipeline.controller import PipelineController, config_hash
    from seamline.pipeline.definition import definition_from_data
    from seamline.trace.writer import TraceWriter

    verification = _checked(source)
    header = verification.header
    drift: dict[str, list[str]] = {"definition": [], "config": [], "model": [], "prompt": []}
    recorded_def = definition_from_data(header["definition"], origin="recorded definition")
    chosen = definition or recorded_def
    if chosen.definition_hash() != header["definition_hash"]:
        drift["definition"].append(
            f"definition hash {chosen.definition_hash()[:12]} != recorded {header['definition_hash'][:12]}"
        )
    run_config = dict(config) if config is not None else dict(header["config"])
    if config_hash(run_config) != header["config_hash"]:
        changed = sorted(
            k for k in set(run_config) | set(header["config"]) if run_config.get(k) != header["config"].get(k)
        )
        drift["config"].append(f"config differs in {', '.join(changed)}")
    recorded_ids: dict[str, dict[str, Any]] = header.get("providers", {})
    for role, ident in (identities or {}).items():
        was = recorded_ids.get(role, {})
        for key in ("provider", "model", "implementation"):
            if ident.get(key) != was.get(key):
                drift["model"].append(f"role {role}: {key} {ident.get(key)!r} != recorded {was.get(key)!r}")
    responses: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    prompts: dict[tuple[str, str, int, int], str] = {}
    recorded_transitions: list[tuple[str, str]] = []
    recorded_decisions: list[dict[str, Any]] = []
    for rec in verification.records:
        d = rec.d
        if rec.kind == "event":
            akey = (str(d["phase"]), str(d["role"]), int(d["round"]), int(d["attempt"]))
            responses.setdefault(akey, []).append({**d["event"], **rec.o})
        elif rec.kind == "prompt":
            prompts[(d["phase"], d["role"], int(d["round"]), int(d["attempt"]))] = d["prompt_hash"]
        elif rec.kind == "transition":
            recorded_transitions.append((d["from"], d["to"]))
        elif rec.kind == "decision":
            recorded_decisions.append(d["decision"])
    agents = RecordedAgents(
        responses=responses, prompts=prompts, identities={k: dict(v) for k, v in (identities or recorded_ids).items()}
    )
    controller = PipelineController(
        chosen,
        agents=agents,
        writer=TraceWriter(None),
        run_id=f"redrive-{verification.run_id}",
        config=run_config,
        role_kinds=role_kinds,
    )

    async def drive() -> None:
        async for _ in controller.run(str(header["task"])):
            pass

    asyncio.run(drive())
    drift["prompt"] = list(agents.prompt_drift)
    differences: list[str] = []
    report = controller.report
    if report.transitions != recorded_transitions:
        differences.append(f"transitions {report.transitions} != recorded {recorded_transitions}")
    import msgspec

    now = [msgspec.to_builtins(dec) for dec in report.decisions]
    for i, (a, b) in enumerate(zip(now, recorded_decisions, strict=False), 1):
        if (a["status"], list(a["verdicts"]), a["reason"]) != (b["status"], list(b["verdicts"]), b["reason"]):
            differences.append(f"decision {i}: {a['status']} ({a['reason']}) != recorded {b['status']} ({b['reason']})")
    if len(now) != len(recorded_decisions):
        differences.append(f"{len(now)} decision(s) != {len(recorded_decisions)} recorded")
    for item in agents.missing:
        differences.append(f"missing response: {item}")
    return RedriveReport(
        same=not differences,
        drift=drift,
        differences=differences,
        outcome=report.outcome,
        stop_reason=report.stop_reason,
    )
