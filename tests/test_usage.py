"""Cost comes from maintained price data; an unknown model is unknown cost, never zero."""

from __future__ import annotations

import pytest

from seamline.errors import ERROR_KINDS, SeamlineError, error_for_kind
from seamline.events import Usage
from seamline.usage import Rates, price_usage, priced_usage


def test_known_model_is_priced_with_cache_rates() -> None:
    # below the 200k-token tier, where long-context prices apply
    plain = Usage(input_tokens=100_000, output_tokens=0)
    cached = Usage(input_tokens=100_000, output_tokens=0, cache_read_tokens=90_000)
    full = price_usage(plain, model="claude-sonnet-4-5", provider="anthropic")
    cheaper = price_usage(cached, model="claude-sonnet-4-5", provider="anthropic")
    assert full is not None and cheaper is not None
    assert full == pytest.approx(0.3)  # $3 per million input tokens
    # 10k plain at $3/M + 90k cache reads at $0.30/M
    assert cheaper == pytest.approx(0.03 + 0.027)


def test_unknown_model_gives_unknown_cost_not_zero() -> None:
    usage = priced_usage(Usage(input_tokens=10, output_tokens=10), model="no-such-model-xyz")
    assert usage.priced is False
    assert usage.cost_usd is None


def test_reported_cost_is_kept_and_rates_win() -> None:
    reported = Usage(input_tokens=5, output_tokens=5, cost_usd=0.5, priced=True)
    assert priced_usage(reported, model="gpt-4o") is reported
    rates = Rates(input=1.0, output=2.0, cache_read=0.1, cache_write=1.25)
    usage = Usage(input_tokens=2_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=0)
    priced = priced_usage(usage, model="anything", rates=rates)
    assert priced.priced is True
    assert priced.cost_usd == pytest.approx(1.0 + 0.1 + 2.0)


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_every_error_kind_has_a_class_and_event(kind: str) -> None:
    exc = error_for_kind(kind, "boom")  # type: ignore[arg-type]
    assert isinstance(exc, SeamlineError)
    assert exc.kind == kind
    event = exc.to_event(attempt=3)
    assert (event.kind, event.message, event.attempt) == (kind, "boom", 3)


@pytest.mark.parametrize(
    ("model", "provider"), [("gpt-4o", None), ("claude-sonnet-4-6", "anthropic"), ("claude-sonnet-4-5", "anthropic")]
)
def test_fast_path_matches_the_price_library(model: str, provider: str | None) -> None:
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    for tokens in ((1000, 200, 0, 0), (50_000, 1_000, 20_000, 5_000), (300_000, 10, 0, 0)):
        usage = Usage(
            input_tokens=tokens[0], output_tokens=tokens[1], cache_read_tokens=tokens[2], cache_write_tokens=tokens[3]
        )
        expected = calc_price(
            PriceUsage(
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                cache_read_tokens=tokens[2] or None,
                cache_write_tokens=tokens[3] or None,
            ),
            model,
            provider_id=provider,
        ).total_price
        assert price_usage(usage, model=model, provider=provider) == pytest.approx(float(expected), rel=1e-9)
