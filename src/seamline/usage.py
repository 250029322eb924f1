"""Usage and cost.

Cost comes from the maintained price data of the ``genai-prices`` package, loaded only
when a model needs pricing. A model it does not know gives cost unknown
(``priced=False``, ``cost_usd=None``), never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from decimal import Decimal
from functools import lru_cache
from typing import Final

import msgspec

from seamline.events import Usage

__all__ = ["FREE", "Rates", "UsageTotals", "price_usage", "priced_usage"]


@dataclass(frozen=True, slots=True)
class Rates:
    """Prices in USD per million tokens; cache tokens have their own rates."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        cached_read = usage.cache_read_tokens
        cached_write = usage.cache_write_tokens
        plain_input = max(usage.input_tokens - cached_read - cached_write, 0)
        read_rate = self.input if self.cache_read is None else self.cache_read
        write_rate = self.input if self.cache_write is None else self.cache_write
        total = (
            plain_input * self.input
            + cached_read * read_rate
            + cached_write * write_rate
            + usage.output_tokens * self.output
        )
        return total / 1_000_000


@dataclass(slots=True)
class UsageTotals:
    """Running sums of usage figures. ``cost_usd`` adds only priced figures; ``unpriced``
    counts the others, so a total with ``unpriced > 0`` is a lower bound, never a silent zero."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0

    def add(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        if usage.priced and usage.cost_usd is not None:
            self.cost_usd += usage.cost_usd
        else:
            self.unpriced += 1

    def merge(self, other: UsageTotals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def cost_known(self) -> bool:
        return self.unpriced == 0

    def data(self) -> dict[str, int | float | bool]:
        """The sums as a JSON object (for traces and reports)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 9),
            "priced": self.unpriced == 0,
        }


FREE: Final = Rates(input=0.0, output=0.0, cache_read=0.0, cache_write=0.0)


@lru_cache(maxsize=256)
def _price_entry(model: str, provider: str | None) -> Rates | bool:
    """Flat :class:`Rates` for ``model`` when its prices have no tiers (priced here, in
    floats, about fifty times faster than the price library's decimal path), ``True`` when
    the model is known but tiered, ``False`` when it is unknown."""
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - genai-prices is a base dependency
        return False
    try:
        found = calc_price(PriceUsage(input_tokens=1, output_tokens=1), model, provider_id=provider)
    except LookupError:
        return False
    price = found.model_price
    parts = [
        getattr(price, name, None) for name in ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
    ]
    if not all(p is None or isinstance(p, Decimal | int | float) for p in parts):
        return True
    as_float = [None if p is None else float(p) for p in parts]
    return Rates(input=as_float[0] or 0.0, output=as_float[1] or 0.0, cache_read=as_float[2], cache_write=as_float[3])


def price_usage(usage: Usage, *, model: str | None, provider: str | None = None) -> float | None:
    """Cost of ``usage`` for ``model`` from the price data, or ``None`` when unknown."""
    if not model:
        return None
    entry = _price_entry(model, provider)
    if entry is False:
        return None
    if isinstance(entry, Rates):
        return entry.cost(usage)
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    result = calc_price(
        PriceUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens or None,
            cache_write_tokens=usage.cache_write_tokens or None,
        ),
        model,
        provider_id=provider,
    )
    return float(Decimal(result.total_price))


def priced_usage(
    usage: Usage,
    *,
    model: str | None,
    provider: str | None = None,
    rates: Rates | None = None,
) -> Usage:
    """``usage`` with ``cost_usd`` and ``priced`` filled in.

    A usage that already carries a reported cost is kept as it is. ``rates`` (from a
    provider's rates hook) win over the shared price data.
    """
    if usage.priced and usage.cost_usd is not None:
        return usage
    cost = rates.cost(usage) if rates is not None else price_usage(usage, model=model, provider=provider)
    if cost is None and usage.cost_usd is None and not usage.priced and usage.model:
        return usage  # unknown cost, said as it came: a copy would be the same figure (events are frozen)
    return msgspec.structs.replace(usage, cost_usd=cost, priced=cost is not None, model=usage.model or model)
