"""The baseline gate of ``seamline eval --baseline``: did a variant do worse than before?

Variants are matched by label, trials by task and sample. A variant **regressed** when

- its pass rate on the trials both evaluations finished fell, and the exact McNemar test
  over those pairs gives a two-sided p-value below ``significance`` (default 0.05): a drop
  that chance alone would rarely give; or
- its cost per pass rose by more than ``max_cost_increase`` (a fraction: 0.2 is 20 %),
  both costs being known.

The comparison is printed either way; the CLI exits 8 (``regressed``) when any variant did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from seamline.evals.stats import mcnemar_exact

__all__ = ["DEFAULT_SIGNIFICANCE", "compare"]

DEFAULT_SIGNIFICANCE: Final = 0.05


def compare(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    significance: float = DEFAULT_SIGNIFICANCE,
    max_cost_increase: float | None = None,
) -> tuple[list[str], list[str]]:
    """The comparison, one line per variant, and the variants that regressed (with why)."""
    before = {(r["task"], r["variant"], r["sample"]): bool(r["passed"]) for r in baseline.get("results", [])}
    base_variants = {v["variant"]: v for v in baseline.get("variants", [])}
    lines: list[str] = []
    regressed: list[str] = []
    for variant in current.get("variants", []):
        label = variant["variant"]
        old = base_variants.get(label)
        if old is None:
            lines.append(f"{label}: not in the baseline {str(baseline.get('id', ''))[:12]}")
            continue
        pairs = [
            (before[(r["task"], label, r["sample"])], bool(r["passed"]))
            for r in current.get("results", [])
            if r["variant"] == label and (r["task"], label, r["sample"]) in before
        ]
        if not pairs:
            lines.append(f"{label}: no trial in common with the baseline")
            continue
        test = mcnemar_exact(pairs)
        was = sum(a for a, _ in pairs) / len(pairs)
        now = sum(b for _, b in pairs) / len(pairs)
        why = []
        if now < was and test.p_value < significance:
            why.append(f"pass rate fell from {was:.2f} to {now:.2f} (p = {test.p_value:.3g} < {significance})")
        cost_line = ""
        old_cost, new_cost = old.get("cost_per_pass"), variant.get("cost_per_pass")
        if old_cost is not None and new_cost is not None and old_cost > 0:
            rise = new_cost / old_cost - 1
            cost_line = f", cost per pass ${old_cost:.4f} -> ${new_cost:.4f} ({rise:+.0%})"
            if max_cost_increase is not None and rise > max_cost_increase:
                why.append(f"cost per pass rose {rise:+.0%}, past {max_cost_increase:.0%}")
        verdict = "REGRESSED: " + "; ".join(why) if why else "ok"
        lines.append(
            f"{label}: pass rate {was:.2f} -> {now:.2f} on {len(pairs)} paired trials "
            f"({test.a_only} passed only before, {test.b_only} only now, p = {test.p_value:.3g}){cost_line} — {verdict}"
        )
        if why:
            regressed.append(f"{label}: {'; '.join(why)}")
    return lines, regressed
