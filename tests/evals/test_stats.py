"""The evaluation's numbers against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seamline.evals.stats import cost_per_pass, mcnemar_exact, pass_at_k, pass_hat_k, wilson_interval


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # n=4, c=1: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 0, 4) == 0.0
    # Any pass among all four samples: pass@4 is 1.
    assert pass_at_k(4, 1, 4) == 1.0
    # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)


def test_pass_hat_k_is_the_chance_that_all_k_drawn_passed() -> None:
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 3, 4) == 0.0
    # n=4, c=3, k=2: C(3,2)/C(4,2) = 3/6
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 1) == pytest.approx(0.5)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_impossible_counts_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="need"):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError, match="need"):
        pass_hat_k(n, c, k)


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_bounds_pass_hat_k_and_both_are_rates(sample: tuple[int, int, int]) -> None:
    n, c, k = sample
    at, hat = pass_at_k(n, c, k), pass_hat_k(n, c, k)
    assert 0.0 <= hat <= at + 1e-12 and at <= 1.0
    if k == 1:
        assert at == pytest.approx(c / n) and hat == pytest.approx(c / n)


def test_the_wilson_interval_matches_the_formula() -> None:
    # 3 of 10 at z=1.96: centre (0.3 + 0.19208)/1.38416, half 1.96*sqrt(0.021+0.0009604)/1.38416
    z = 1.959963984540054
    centre = (0.3 + z * z / 20) / (1 + z * z / 10)
    half = z * math.sqrt(0.3 * 0.7 / 10 + z * z / 400) / (1 + z * z / 10)
    interval = wilson_interval(3, 10)
    assert interval.rate == pytest.approx(0.3)
    assert (interval.low, interval.high) == pytest.approx((centre - half, centre + half))
    assert (interval.low, interval.high) == pytest.approx((0.1078, 0.6032), abs=1e-4)
    # At the edges the interval stays inside [0, 1] and is not empty.
    none, every = wilson_interval(0, 4), wilson_interval(4, 4)
    assert none.low == 0.0 and 0.4 < none.high < 0.5
    assert every.high == 1.0 and 0.5 < every.low < 0.6
    with pytest.raises(ValueError):
        wilson_interval(1, 0)


def test_the_paired_test_counts_only_discordant_pairs() -> None:
    # A passes 6 pairs B fails, B none A fails: p = 2 * (1/2)^6
    pairs = [(True, False)] * 6 + [(True, True)] * 5 + [(False, False)] * 3
    result = mcnemar_exact(pairs)
    assert (result.pairs, result.a_only, result.b_only) == (14, 6, 0)
    assert result.p_value == pytest.approx(2 / 64)
    # 3 against 1: p = 2 * (C(4,0)+C(4,1))/16 = 10/16
    assert mcnemar_exact([(True, False)] * 3 + [(False, True)]).p_value == pytest.approx(10 / 16)
    assert mcnemar_exact([(True, True), (False, False)]).p_value == 1.0
    # Symmetric: swapping A and B gives the same p-value.
    swapped = mcnemar_exact([(b, a) for a, b in pairs])
    assert swapped.p_value == result.p_value and swapped.b_only == 6


def test_cost_per_pass_keeps_unknown_prices_unknown() -> None:
    assert cost_per_pass([0.1, 0.2, 0.3], 2) == pytest.approx(0.3)
    assert cost_per_pass([0.1, None], 2) is None
    assert cost_per_pass([0.1, 0.2], 0) is None
    assert cost_per_pass([0.0, 0.0], 1) == 0.0
