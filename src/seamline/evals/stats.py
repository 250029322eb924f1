"""The numbers of an evaluation: pass@k, pass^k, Wilson intervals, cost per pass and the
paired comparison of two variants on the same trials.

- **pass@k** is the unbiased estimator of Chen et al. (2021): with ``n`` samples of a task
  of which ``c`` passed, ``1 - C(n-c, k) / C(n, k)``, the chance that at least one of ``k``
  samples drawn without replacement passes. Averaged over tasks.
- **pass^k** is its counterpart for reliability (Yao et al., τ-bench): ``C(c, k) / C(n, k)``,
  the chance that all ``k`` drawn samples pass; with ``n == k`` it is 1 exactly when every
  sample passed. Averaged over tasks.
- **Wilson score interval** (95 %) on a pass rate: honest at 0 and 1 and for few trials,
  where the normal approximation is not.
- **Paired comparison**: the exact McNemar test on trials paired by task and sample index —
  only the pairs where one variant passed and the other failed count; the two-sided p-value
  is the binomial tail of the smaller count at one half.
- **Cost per pass** is the total cost over the passes; an unknown price leaves it unknown
  (``None``), never $0, and no pass leaves it unknown too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

__all__ = [
    "Interval",
    "PairedComparison",
    "cost_per_pass",
    "mcnemar_exact",
    "pass_at_k",
    "pass_hat_k",
    "wilson_interval",
]

_Z95: Final = 1.959963984540054


class Interval(msgspec.Struct, frozen=True):
    """A rate and its 95 % interval."""

    rate: float
    low: float
    high: float


class PairedComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Variant A against B on the same trials: the discordant pairs and the exact p-value."""

    pairs: int
    a_only: int  # pairs where A passed and B failed
    b_only: int
    p_value: float


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task with ``n`` samples, ``c`` of them passed."""
    _counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one task: the chance that ``k`` samples drawn from ``n`` all passed."""
    _counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def wilson_interval(passes: int, trials: int, *, z: float = _Z95) -> Interval:
    """The Wilson score interval of ``passes`` out of ``trials`` (``trials`` > 0)."""
    if trials <= 0 or not 0 <= passes <= trials:
        raise ValueError(f"need 0 <= passes <= trials and trials > 0, got {passes}/{trials}")
    p = passes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Interval(rate=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


def mcnemar_exact(pairs: Iterable[tuple[bool, bool]]) -> PairedComparison:
    """The exact (binomial) McNemar test over ``(a_passed, b_passed)`` pairs."""
    listed = list(pairs)
    a_only = sum(1 for a, b in listed if a and not b)
    b_only = sum(1 for a, b in listed if b and not a)
    discordant = a_only + b_only
    if discordant == 0:
        return PairedComparison(pairs=len(listed), a_only=0, b_only=0, p_value=1.0)
    tail = sum(math.comb(discordant, i) for i in range(min(a_only, b_only) + 1)) / 2**discordant
    return PairedComparison(pairs=len(listed), a_only=a_only, b_only=b_only, p_value=min(1.0, 2 * tail))


def cost_per_pass(costs: Sequence[float | None], passes: int) -> float | None:
    """Total cost over passes; ``None`` when any cost is unknown or nothing passed."""
    if passes <= 0 or any(c is None for c in costs):
        return None
    return sum(c for c in costs if c is not None) / passes


def _counts(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
