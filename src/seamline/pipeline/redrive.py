"""Re-drive: run the controller again, on a trace's recorded responses instead of providers.

It compares the transitions and decisions the controller reaches with the recorded ones.
A difference is reported by its cause: ``definition``, ``config``, ``model`` or ``prompt``
drift (and ``decision`` differences when none of those explains it). Replay, which only
reads the trace, is :func:`seamline.trace.replay.replay`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from seamline.definitions import PipelineDefinition, definition_from_data
from seamline.events import Outcome
from seamline.pipeline.agents import RecordedAgents
from seamline.pipeline.controller import PipelineController, RunReport, config_hash
from seamline.trace.replay import checked_trace
from seamline.trace.schema import (
    DecisionRecord,
    EventRecord,
    HeaderData,
    PromptRecord,
    RecordedDecision,
    TransitionRecord,
)
from seamline.trace.verify import Verification
from seamline.trace.writer import TraceWriter

__all__ = ["RedriveReport", "redrive"]

AttemptKey = tuple[str, str, int, int]  # phase, role, round, attempt


@dataclass
class RedriveReport:
    """What a re-drive found: whether the controller reached the same end, and why not."""

    same: bool
    drift: dict[str, list[str]]
    differences: list[str]
    outcome: Outcome
    stop_reason: str

    def data(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "drift": self.drift,
            "differences": self.differences,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason,
        }


@dataclass
class _Recorded:
    """What the trace says happened: each attempt's responses and prompt hash, the
    transitions and the decisions."""

    responses: dict[AttemptKey, list[dict[str, Any]]]
    prompts: dict[AttemptKey, str]
    transitions: list[tuple[str, str]]
    decisions: list[RecordedDecision]


def redrive(
    source: str | os.PathLike[str] | bytes | Verification,
    *,
    definition: PipelineDefinition | None = None,
    config: Mapping[str, Any] | None = None,
    identities: Mapping[str, Mapping[str, Any]] | None = None,
    role_kinds: Mapping[str, Callable[..., Any]] | None = None,
) -> RedriveReport:
    """Run the controller again against the recorded responses.

    ``definition``, ``config`` and ``identities`` (provider identity per role) default to
    the recorded ones; give today's to see whether a change would alter the run."""
    verification = checked_trace(source)
    header = verification.header_data
    assert header is not None  # a verified trace starts with its header
    chosen = definition or definition_from_data(header.definition, origin="recorded definition")
    run_config = dict(config) if config is not None else dict(header.config)
    drift = _drift(header, chosen, run_config, identities or {})
    recorded = _recorded(verification)
    recorded_ids = header.providers
    agents = RecordedAgents(
        responses=recorded.responses,
        prompts=recorded.prompts,
        identities={k: dict(v) for k, v in (identities or recorded_ids).items()},
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
        async for _ in controller.run(header.task):
            pass

    asyncio.run(drive())
    drift["prompt"] = list(agents.prompt_drift)
    report = controller.report
    differences = _differences(report, recorded) + [f"missing response: {item}" for item in agents.missing]
    return RedriveReport(
        same=not differences,
        drift=drift,
        differences=differences,
        outcome=report.outcome,
        stop_reason=report.stop_reason,
    )


def _drift(
    header: HeaderData,
    chosen: PipelineDefinition,
    run_config: dict[str, Any],
    identities: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[str]]:
    """Why a re-drive may differ before it runs: definition, config and model drift."""
    drift: dict[str, list[str]] = {"definition": [], "config": [], "model": [], "prompt": []}
    if chosen.definition_hash() != header.definition_hash:
        drift["definition"].append(
            f"definition hash {chosen.definition_hash()[:12]} != recorded {header.definition_hash[:12]}"
        )
    if config_hash(run_config) != header.config_hash:
        recorded_config = header.config
        changed = sorted(
            k for k in set(run_config) | set(recorded_config) if run_config.get(k) != recorded_config.get(k)
        )
        drift["config"].append(f"config differs in {', '.join(changed)}")
    for role, ident in identities.items():
        was = header.providers.get(role, {})
        for key in ("provider", "model", "implementation"):
            if ident.get(key) != was.get(key):
                drift["model"].append(f"role {role}: {key} {ident.get(key)!r} != recorded {was.get(key)!r}")
    return drift


def _recorded(verification: Verification) -> _Recorded:
    recorded = _Recorded(responses={}, prompts={}, transitions=[], decisions=[])
    for rec in verification.typed_records:
        match rec:
            case EventRecord(d=d, o=o):
                key = (d.phase, d.role, d.round, d.attempt)
                recorded.responses.setdefault(key, []).append({**d.event, **msgspec.to_builtins(o)})
            case PromptRecord(d=d):
                recorded.prompts[(d.phase, d.role, d.round, d.attempt)] = d.prompt_hash
            case TransitionRecord(d=d):
                recorded.transitions.append((d.from_, d.to))
            case DecisionRecord(d=d):
                recorded.decisions.append(d.decision)
            case _:
                pass  # the rest is the controller's to reach again
    return recorded


def _differences(report: RunReport, recorded: _Recorded) -> list[str]:
    """Where the controller's transitions and decisions now differ from the recorded ones."""
    differences: list[str] = []
    if report.transitions != recorded.transitions:
        differences.append(f"transitions {report.transitions} != recorded {recorded.transitions}")
    now = [msgspec.to_builtins(dec) for dec in report.decisions]
    for i, (a, b) in enumerate(zip(now, recorded.decisions, strict=False), 1):
        if (a["status"], list(a["verdicts"]), a["reason"]) != (b.status, b.verdicts, b.reason):
            differences.append(f"decision {i}: {a['status']} ({a['reason']}) != recorded {b.status} ({b.reason})")
    if len(now) != len(recorded.decisions):
        differences.append(f"{len(now)} decision(s) != {len(recorded.decisions)} recorded")
    return differences
