"""An evaluation's numbers, from its plan and its finished trials (see :mod:`seamline.evals.stats`).

Per variant: trials, passes, the pass rate with its Wilson interval, pass@1, pass@k and
pass^k (each the mean over the tasks that have at least k finished samples), cost (total
and per pass; unknown stays unknown), tokens, mean wall time and diff size. Per task and
variant: the same pass figures. And every pair of variants compared on the trials both
finished, paired by task and sample.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from seamline.evals.record import EvalPlan, TrialResult
from seamline.evals.stats import cost_per_pass, mcnemar_exact, pass_at_k, pass_hat_k, wilson_interval

__all__ = ["report", "table"]


def report(plan: EvalPlan, trials: Sequence[TrialResult], *, status: str = "completed") -> dict[str, Any]:
    """The whole result as one JSON-ready object."""
    by_key = {t.key: t for t in trials}
    k = plan.samples
    variants: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for variant in plan.variants:
        mine = [t for t in trials if t.variant == variant.label]
        passes = sum(t.passed for t in mine)
        per_task: list[tuple[int, int]] = []
        for task in plan.tasks:
            done = [t for t in mine if t.task == task.id]
            n, c = len(done), sum(t.passed for t in done)
            if n:
                per_task.append((n, c))
                tasks.append(
                    {"task": task.id, "variant": variant.label, "samples": n, "passes": c, **_pass_figures(n, c, k)}
                )
        costs = [t.cost_usd for t in mine]
        rate = wilson_interval(passes, len(mine)) if mine else None
        variants.append(
            {
                "variant": variant.label,
                "provider": variant.provider,
                "model": variant.model,
                "trials": len(mine),
                "passes": passes,
                "pass_rate": None if rate is None else rate.rate,
                "interval": None if rate is None else [rate.low, rate.high],
                "pass@1": _mean([c / n for n, c in per_task]),
                f"pass@{k}": _mean([pass_at_k(n, c, k) for n, c in per_task if n >= k]),
                f"pass^{k}": _mean([pass_hat_k(n, c, k) for n, c in per_task if n >= k]),
                "cost_usd": None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
                "cost_per_pass": cost_per_pass(costs, passes),
                "input_tokens": sum(t.input_tokens for t in mine),
                "output_tokens": sum(t.output_tokens for t in mine),
                "mean_elapsed_s": _mean([t.elapsed_s for t in mine]),
                "mean_diff_lines": _mean([t.insertions + t.deletions for t in mine]),
                "judged": sum(t.judge_verdict is not None for t in mine),
                "judge_passes": sum(t.judge_verdict == "pass" for t in mine),
                "mean_judge_score": _mean([t.judge_score for t in mine if t.judge_score is not None]),
                "judge_cost_usd": None
                if any(t.judge_cost_usd is None for t in mine)
                else sum(t.judge_cost_usd or 0.0 for t in mine),
            }
        )
    pairs = []
    for a, b in itertools.combinations([v.label for v in plan.variants], 2):
        paired = [
            (by_key[(task.id, a, s)].passed, by_key[(task.id, b, s)].passed)
            for task in plan.tasks
            for s in range(1, k + 1)
            if (task.id, a, s) in by_key and (task.id, b, s) in by_key
        ]
        result = mcnemar_exact(paired)
        pairs.append(
            {
                "a": a,
                "b": b,
                "pairs": result.pairs,
                "a_only": result.a_only,
                "b_only": result.b_only,
                "p_value": result.p_value,
            }
        )
    return {
        "id": plan.id,
        "dataset": plan.dataset,
        "status": status,
        "samples": k,
        "trials": {"planned": len(plan.trial_keys()), "finished": len(trials)},
        "variants": variants,
        "tasks": tasks,
        "comparisons": pairs,
        "test": "exact McNemar, two-sided, pairs by task and sample",
        "results": [
            {"task": t.task, "variant": t.variant, "sample": t.sample, "passed": t.passed, "cost_usd": t.cost_usd}
            for t in trials
        ],
    }


def table(data: dict[str, Any]) -> str:
    """The per-variant figures as a plain-text table."""
    k = data["samples"]
    head = (
        "variant",
        "trials",
        "passed",
        "rate [95% CI]",
        "pass@1",
        f"pass@{k}",
        f"pass^{k}",
        "cost",
        "$/pass",
        "judge",
        "time",
    )
    rows = [head]
    for v in data["variants"]:
        interval = v["interval"]
        rate = "-" if v["pass_rate"] is None else f"{v['pass_rate']:.2f} [{interval[0]:.2f}-{interval[1]:.2f}]"
        rows.append(
            (
                v["variant"],
                str(v["trials"]),
                str(v["passes"]),
                rate,
                _num(v["pass@1"]),
                _num(v[f"pass@{k}"]),
                _num(v[f"pass^{k}"]),
                _money(v["cost_usd"]),
                _money(v["cost_per_pass"]),
                "-" if v["mean_judge_score"] is None else f"{v['mean_judge_score']:.2f}",
                "-" if v["mean_elapsed_s"] is None else f"{v['mean_elapsed_s']:.1f}s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for pair in data["comparisons"]:
        lines.append(
            f"{pair['a']} vs {pair['b']}: {pair['a_only']} trials only {pair['a']} passed, "
            f"{pair['b_only']} only {pair['b']}, p = {pair['p_value']:.3g} (exact McNemar, {pair['pairs']} pairs)"
        )
    return "\n".join(lines)


def _pass_figures(n: int, c: int, k: int) -> dict[str, float | None]:
    enough = n >= k
    return {
        "pass@1": c / n,
        f"pass@{k}": pass_at_k(n, c, k) if enough else None,
        f"pass^{k}": pass_hat_k(n, c, k) if enough else None,
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"
