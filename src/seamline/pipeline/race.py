"""A race as a pipeline: the same task on several racers at once, each run judged, the
runs ranked, a winner named.

The definition (:func:`race_definition`) has three phases, four with a reviewer::

    race   roles r1 … rN together      each racer works on the task (kind ``racer``)
    check  roles check-r1 … check-rN   each racer's run measured and its check run (``race-check``)
    review roles review-r1 …           optional: an agent reads each diff (``race-reviewer``)
    rank   role ranker, a judge        the ranking and the winner (``race-ranker``)

The roles stay passive. Where a racer works (its worktree), how its check command runs
(in the sandbox or not) and which backend reviews are wiring above this room
(:mod:`seamline.live.race`): a check is one "turn" of the run's agents whose final text
is the JSON of :class:`CheckResult`, so the trace records what was measured and a
re-drive reaches the same ranking without running anything. The ranker is a pure
function of that evidence; its output (``data["ranking"]``, ``data["winner"]``) and the
convergence decision after it are in the trace: ``approve`` (converged) when a run
passed, ``veto`` when none did.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import msgspec

from seamline.definitions import ConvergenceSpec, PhaseSpec, PipelineDefinition, RetryPolicy, RoleBinding, TeamLimits
from seamline.errors import InvalidRequest
from seamline.pipeline.roles import (
    AgentResponse,
    AgentRole,
    Role,
    RoleContext,
    RoleFailure,
    RoleOutput,
    register_role_kind,
)
from seamline.trace.schema import PlainRecord

__all__ = [
    "CHECK_PREFIX",
    "REVIEW_PREFIX",
    "CheckResult",
    "RaceCheck",
    "RaceRanker",
    "RaceReviewer",
    "RacerRole",
    "race_definition",
    "rank_entries",
    "racer_of",
    "ranking_in",
]

CHECK_PREFIX: Final = "check-"
REVIEW_PREFIX: Final = "review-"
_TAIL: Final = 2000  # characters of a check's output kept in the trace
_REVIEW_DIFF: Final = 20_000  # characters of a racer's diff a reviewer is shown


def racer_of(role: str) -> str | None:
    """The racer a ``check-…`` or ``review-…`` role judges (``None`` for other roles)."""
    for prefix in (CHECK_PREFIX, REVIEW_PREFIX):
        if role.startswith(prefix):
            return role[len(prefix) :]
    return None


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the wiring measured of one racer's run, and its check command's result.

    ``passed``: the racer's turn completed and the check exited 0 (no check command: the
    turn completed). ``exit_code`` is ``None`` without a check or when it could not run
    (``error`` says why). ``cost_usd`` is ``None`` when some of the run's cost is unknown."""

    racer: str
    outcome: str
    passed: bool
    exit_code: int | None = None
    command: str | None = None
    tail: str = ""
    error: str | None = None
    cost_usd: float | None = 0.0
    elapsed_s: float = 0.0
    files: int = 0
    insertions: int = 0
    deletions: int = 0
    commit: str | None = None
    session_id: str = ""
    branch: str = ""
    diff: str = ""  # the run's diff, cut to what a reviewer is shown

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @staticmethod
    def tail_of(text: str) -> str:
        return text[-_TAIL:]

    @staticmethod
    def diff_of(text: str) -> str:
        return text[:_REVIEW_DIFF]


class RacerRole(AgentRole):
    """One racer: an agent turn on the task. A turn that fails does not fail the phase
    (the others race on; the check marks it not passed); only a budget stop does."""

    kind: ClassVar[str] = "racer"

    def interpret(self, ctx: RoleContext, response: AgentResponse) -> RoleOutput | RoleFailure:
        if response.outcome == "budget":
            return RoleFailure(kind="budget", message=response.error_message or "the race's budget was spent")
        data: dict[str, Any] = {"outcome": response.outcome, "stop_reason": response.stop_reason}
        if response.error_message:
            data["error"] = response.error_message
        return RoleOutput(text=response.text, data=data)


class RaceCheck(Role):
    """Judges one racer's run: the wiring runs the check command in the racer's worktree
    (the prompt is the command) and answers a :class:`CheckResult` as JSON."""

    kind: ClassVar[str] = "race-check"
    capabilities: ClassVar[tuple[str, ...]] = ("check", "verdict:pass|fail")
    uses_agent: ClassVar[bool] = True

    def prompt(self, ctx: RoleContext) -> str:
        return self.binding.options.get("command", "")

    def interpret(self, ctx: RoleContext, response: AgentResponse) -> RoleOutput | RoleFailure:
        if response.outcome == "budget":
            return RoleFailure(kind="budget", message="the race's budget was spent")
        try:
            result = msgspec.json.decode(response.text, type=CheckResult)
        except msgspec.DecodeError:
            message = response.error_message or f"the check gave no result ({response.outcome})"
            return RoleFailure(kind="provider", message=message)
        shown = "passed" if result.passed else "failed"
        return RoleOutput(
            text=f"{result.racer}: {shown}",
            verdict="pass" if result.passed else "fail",
            data=msgspec.to_builtins(result),
        )


_REVIEW_PROMPT: Final = """\
Review one attempt at this task. Task: {task}

The attempt's check {check}. Its diff:

{diff}

Answer with your reasons, then a last line that is exactly APPROVE or REJECT."""


class RaceReviewer(AgentRole):
    """An agent reads one racer's diff and approves or rejects it (its last line)."""

    kind: ClassVar[str] = "race-reviewer"
    capabilities: ClassVar[tuple[str, ...]] = ("review", "verdict:approve|reject")

    def prompt(self, ctx: RoleContext) -> str:
        racer = racer_of(self.name) or ""
        check = ctx.evidence.get(CHECK_PREFIX + racer)
        data = check.data if check is not None else {}
        passed = "passed" if data.get("passed") else "failed"
        diff = str(data.get("diff") or "(no changes)")
        return _REVIEW_PROMPT.format(task=ctx.task, check=passed, diff=diff)

    def interpret(self, ctx: RoleContext, response: AgentResponse) -> RoleOutput | RoleFailure:
        if response.outcome == "budget":
            return RoleFailure(kind="budget", message="the race's budget was spent")
        lines = [line.strip().upper() for line in response.text.strip().splitlines() if line.strip()]
        last = lines[-1].strip("*.` ") if lines else ""
        verdict = "approve" if last == "APPROVE" else "reject"
        return RoleOutput(text=response.text, verdict=verdict, data={"outcome": response.outcome})


def rank_entries(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries best first: passed first, then (with a reviewer) approved, then the
    lowest cost (unknown last), the shortest time, the smallest diff, the racer's order."""

    def key(item: tuple[int, dict[str, Any]]) -> tuple[bool, bool, float, float, int, int]:
        order, e = item
        cost = e.get("cost_usd")
        return (
            not e.get("passed"),
            e.get("review") == "reject",
            math.inf if cost is None else float(cost),
            float(e.get("elapsed_s") or 0.0),
            int(e.get("insertions") or 0) + int(e.get("deletions") or 0),
            order,
        )

    ranked = [e for _, e in sorted(enumerate(entries), key=key)]
    return [{**e, "rank": n} for n, e in enumerate(ranked, start=1)]


class RaceRanker(Role):
    """Ranks the racers from the checks' (and reviews') evidence; names the winner, the
    best run that passed. Verdict ``approve`` with a winner, ``veto`` without one."""

    kind: ClassVar[str] = "race-ranker"
    capabilities: ClassVar[tuple[str, ...]] = ("rank", "verdict:approve|veto")

    def decide(self, ctx: RoleContext) -> RoleOutput | RoleFailure:
        racers = [r for r in self.binding.options.get("racers", "").split(",") if r]
        labels = json.loads(self.binding.options.get("labels", "{}"))
        entries: list[dict[str, Any]] = []
        for racer in racers:
            check = ctx.evidence.get(CHECK_PREFIX + racer)
            if check is None:
                return RoleFailure(kind="invalid_request", message=f"no check of racer {racer} to rank")
            entry = {k: v for k, v in check.data.items() if k not in ("diff", "tail")}
            entry["label"] = labels.get(racer, racer)
            review = ctx.evidence.get(REVIEW_PREFIX + racer)
            if review is not None:
                entry["review"] = review.verdict
            entries.append(entry)
        ranking = rank_entries(entries)
        best = ranking[0] if ranking and ranking[0].get("passed") else None
        if best is not None and best.get("review") == "reject":
            best = None  # every passing run was rejected by the reviewer
        winner = str(best["racer"]) if best is not None else None
        data: dict[str, Any] = {"ranking": ranking, "winner": winner}
        if winner is None:
            why = "no run passed its check" + (" and the review" if any("review" in e for e in entries) else "")
            return RoleOutput(text=why, verdict="veto", confidence=1.0, feedback=why, data=data)
        return RoleOutput(text=f"winner: {winner} ({labels.get(winner, winner)})", verdict="approve", data=data)


def race_definition(
    labels: Sequence[str],
    *,
    check: str | None = None,
    reviewer: bool = False,
    prompt: str | None = None,
    budget_usd: float | None = None,
) -> PipelineDefinition:
    """The pipeline of a race of ``len(labels)`` racers (``r1`` … ``rN``; a label says
    what each one is, ``scripted`` or ``claude-code#2``), judged by ``check`` (a shell
    command run in each racer's worktree) and, with ``reviewer``, a reviewer role each."""
    if len(labels) < 2:
        raise InvalidRequest("a race needs at least two racers (give --provider twice, or --samples 2)")
    racers = [f"r{n}" for n in range(1, len(labels) + 1)]
    named = dict(zip(racers, labels, strict=True))
    roles: dict[str, RoleBinding] = {}
    for racer in racers:
        roles[racer] = RoleBinding(kind=RacerRole.kind, prompt=prompt, options={"label": named[racer]})
        roles[CHECK_PREFIX + racer] = RoleBinding(kind=RaceCheck.kind, options={"command": check or ""})
    phases = [
        PhaseSpec(name="race", roles=tuple(racers), next="check"),
        PhaseSpec(name="check", roles=tuple(CHECK_PREFIX + r for r in racers)),
    ]
    if reviewer:
        for racer in racers:
            roles[REVIEW_PREFIX + racer] = RoleBinding(kind=RaceReviewer.kind)
        phases.append(PhaseSpec(name="review", roles=tuple(REVIEW_PREFIX + r for r in racers)))
    options = {"racers": ",".join(racers), "labels": json.dumps(named, sort_keys=True)}
    roles["ranker"] = RoleBinding(kind=RaceRanker.kind, options=options)
    phases.append(PhaseSpec(name="rank", role="ranker", judge=True, next="done"))
    names = [p.name for p in phases]
    transitions: dict[str, tuple[str, ...]] = {a: (b,) for a, b in zip(names, [*names[1:], "done"], strict=True)}
    return PipelineDefinition(
        name="race",
        description="the same task on several racers at once; each run checked, ranked, a winner named",
        phases=tuple(phases),
        transitions=transitions,
        roles=roles,
        retry=RetryPolicy(max_attempts=1),
        convergence=ConvergenceSpec(strategy="single-pass", max_rounds=1),
        team=TeamLimits(max_parallel=len(racers), max_cost_usd=budget_usd),
    ).validate()


def ranking_in(records: Sequence[PlainRecord]) -> dict[str, Any] | None:
    """The ranker's output in a race's trace records (``ranking``, ``winner``), or
    ``None`` when the race stopped before it ranked (its budget spent, a racer that could
    not start)."""
    for record in reversed(records):
        d = record.d
        if record.kind == "role_end" and d.get("role") == "ranker" and d.get("status") == "ok":
            data = d.get("output", {}).get("data")
            return data if isinstance(data, dict) else None
    return None


for _kind in (RacerRole, RaceCheck, RaceReviewer, RaceRanker):
    register_role_kind(_kind.kind, _kind)
