"""Convergence strategies: typed decisions that keep every way of stopping distinct.

After each judge phase the controller asks the definition's strategy for a
:class:`ConvergenceDecision`. ``continue`` means another feedback round; the others end
the run and stay distinct all the way to its outcome and exit code: ``converged``,
``oscillating``, ``exhausted``, ``vetoed`` (and ``failed``, which the controller decides
when a role fails past its retries). A decision carries its reason, the iteration, the
verdict and confidence history, and a hash of the convergence window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from seamline.definitions import ConvergenceSpec

__all__ = ["ConvergenceDecision", "DecisionStatus", "Judgement", "STRATEGIES", "decide", "failed_decision"]

DecisionStatus = Literal["continue", "converged", "oscillating", "exhausted", "vetoed", "failed"]


@dataclass(frozen=True, slots=True)
class Judgement:
    """One round's judgement: the verdict, the confidence and a hash of what was judged."""

    verdict: str
    confidence: float | None
    subject_hash: str


class ConvergenceDecision(msgspec.Struct, frozen=True, kw_only=True):
    status: DecisionStatus
    reason: str
    strategy: str
    iteration: int
    verdicts: tuple[str, ...]
    confidences: tuple[float | None, ...]
    window_hash: str


def _window_hash(window: Sequence[Judgement]) -> str:
    data = [[j.verdict, j.confidence, j.subject_hash] for j in window]
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()


def _decision(
    status: DecisionStatus, reason: str, strategy: str, history: Sequence[Judgement], spec: ConvergenceSpec
) -> ConvergenceDecision:
    return ConvergenceDecision(
        status=status,
        reason=reason,
        strategy=strategy,
        iteration=len(history),
        verdicts=tuple(j.verdict for j in history),
        confidences=tuple(j.confidence for j in history),
        window_hash=_window_hash(history[-spec.window :]),
    )


def _single_pass(history: Sequence[Judgement], spec: ConvergenceSpec) -> tuple[DecisionStatus, str]:
    return "converged", "one pass is the whole run"


def _fixed_rounds(history: Sequence[Judgement], spec: ConvergenceSpec) -> tuple[DecisionStatus, str]:
    if len(history) >= spec.max_rounds:
        return "converged", f"ran the fixed {spec.max_rounds} round(s)"
    return "continue", f"round {len(history)} of {spec.max_rounds}"


def _alternates(verdicts: Sequence[str]) -> bool:
    return (
        len(verdicts) >= 4
        and len(set(verdicts[-4:])) == 2
        and verdicts[-1] == verdicts[-3] != verdicts[-2] == verdicts[-4]
    )


def _verdict_stability(history: Sequence[Judgement], spec: ConvergenceSpec) -> tuple[DecisionStatus, str]:
    verdicts = [j.verdict for j in history]
    window = verdicts[-spec.window :]
    if len(window) == spec.window and len(set(window)) == 1:
        return "converged", f"verdict {window[0]!r} held for {spec.window} round(s)"
    if _alternates(verdicts):
        return "oscillating", f"verdicts alternate: {', '.join(verdicts[-4:])}"
    if len(history) >= spec.max_rounds:
        return "exhausted", f"no stable verdict in {spec.max_rounds} round(s)"
    return "continue", "verdict not yet stable"


def _reviewer_approval(history: Sequence[Judgement], spec: ConvergenceSpec) -> tuple[DecisionStatus, str]:
    last = history[-1]
    if last.verdict == "approve":
        return "converged", f"reviewer approved in round {len(history)}"
    for k, earlier in enumerate(history[:-1], 1):
        if earlier.subject_hash == last.subject_hash:
            return "oscillating", f"round {len(history)} repeats the answer rejected in round {k}"
    if len(history) >= spec.max_rounds:
        return "exhausted", f"no approval in {spec.max_rounds} round(s)"
    return "continue", f"reviewer asked for a revision ({last.verdict})"


STRATEGIES: Final[dict[str, Callable[[Sequence[Judgement], ConvergenceSpec], tuple[DecisionStatus, str]]]] = {
    "single-pass": _single_pass,
    "fixed-rounds": _fixed_rounds,
    "verdict-stability": _verdict_stability,
    "reviewer-approval": _reviewer_approval,
}


def decide(history: Sequence[Judgement], spec: ConvergenceSpec) -> ConvergenceDecision:
    """The strategy's decision after the latest judgement. A ``veto`` verdict always wins:
    no strategy can turn a veto into convergence."""
    if not history:
        raise ValueError("decide() needs at least one judgement")
    if history[-1].verdict == "veto":
        return _decision("vetoed", "the judge vetoed the subject", spec.strategy, history, spec)
    status, reason = STRATEGIES[spec.strategy](history, spec)
    return _decision(status, reason, spec.strategy, history, spec)


def failed_decision(reason: str, history: Sequence[Judgement], spec: ConvergenceSpec) -> ConvergenceDecision:
    """The decision the controller records when a role fails past its retries."""
    return _decision("failed", reason, spec.strategy, history, spec)
