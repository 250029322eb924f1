"""Convergence strategies: every way of stopping stays distinct."""

from __future__ import annotations

import pytest

from seamline.definitions import ConvergenceSpec
from seamline.pipeline.convergence import Judgement, decide, failed_decision


def js(*verdicts: str, subjects: tuple[str, ...] | None = None) -> list[Judgement]:
    subjects = subjects or tuple(f"s{i}" for i in range(len(verdicts)))
    return [Judgement(v, 0.5, s) for v, s in zip(verdicts, subjects, strict=True)]


def spec(strategy: str, **kw: int) -> ConvergenceSpec:
    return ConvergenceSpec(strategy=strategy, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("strategy", "history", "status"),
    [
        ("reviewer-approval", js("approve"), "converged"),
        ("reviewer-approval", js("revise"), "continue"),
        ("reviewer-approval", js("revise", "revise", "revise"), "exhausted"),
        ("reviewer-approval", js("revise", "revise", subjects=("a", "a")), "oscillating"),
        ("reviewer-approval", js("veto"), "vetoed"),
        ("fixed-rounds", js("revise", "revise"), "continue"),
        ("fixed-rounds", js("revise", "revise", "revise"), "converged"),
        ("verdict-stability", js("approve", "approve"), "converged"),
        ("verdict-stability", js("approve", "revise", "approve", "revise"), "oscillating"),
        ("verdict-stability", js("a", "b", "c"), "exhausted"),
        ("verdict-stability", js("a"), "continue"),
        ("fixed-rounds", js("veto"), "vetoed"),
    ],
)
def test_decisions(strategy: str, history: list[Judgement], status: str) -> None:
    max_rounds = 4 if strategy == "verdict-stability" and status == "oscillating" else 3
    decision = decide(history, spec(strategy, max_rounds=max_rounds, window=2))
    assert decision.status == status
    assert decision.iteration == len(history)
    assert decision.verdicts == tuple(j.verdict for j in history)
    assert decision.confidences == tuple(j.confidence for j in history)
    assert len(decision.window_hash) == 64 and decision.reason


def test_window_hash_covers_the_window_only() -> None:
    s = spec("verdict-stability", max_rounds=9, window=2)
    a = decide(js("x", "a", "b"), s)
    b = decide(js("y", "a", "b"), s)
    c = decide(js("x", "a", "c"), s)
    assert a.window_hash == b.window_hash != c.window_hash


def test_failed_is_its_own_status() -> None:
    decision = failed_decision("writer failed", js("revise"), spec("reviewer-approval"))
    assert decision.status == "failed" and decision.reason == "writer failed"
