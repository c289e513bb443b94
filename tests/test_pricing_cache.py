"""Prompt-cache pricing: cache reads and writes at their own rates per family, and what a cache hit saved."""

from __future__ import annotations

import pytest

from turnout.config.schema import Pricing
from turnout.core.types import Usage
from turnout.ledger.pricing import Catalogue, ProfileRates, Rates, _Rate, rates_from_pricing

M = 1_000_000


@pytest.mark.parametrize(
    ("family", "model"),
    [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-20250514"), ("gemini", "gemini-2.5-flash")],
)
def test_the_catalogue_prices_cache_reads_below_plain_input_for_each_family(family: str, model: str) -> None:
    """genai-prices' cache-read price applies to cached tokens: a cached prompt costs less than an uncached one."""
    rates = Catalogue().rates(family, model)
    assert rates is not None and rates.cached_input is not None
    plain = rates.cost(Usage(input_tokens=10_000, output_tokens=0))
    cached = rates.cost(Usage(input_tokens=10_000, output_tokens=0, cached_input_tokens=8_000))
    assert cached == pytest.approx((2_000 * rates.input.base + 8_000 * rates.cached_input.base) / M)
    assert cached < plain


def test_the_catalogue_prices_anthropic_cache_writes_at_their_own_rate() -> None:
    """Anthropic's cache creation is priced at genai-prices' cache-write price, above plain input."""
    rates = Catalogue().rates("anthropic", "claude-sonnet-4-20250514")
    assert rates is not None and rates.cache_write is not None and rates.cache_write.base > rates.input.base
    cost = rates.cost(Usage(input_tokens=1_000, cache_write_tokens=1_000))
    assert cost == pytest.approx(1_000 * rates.cache_write.base / M)


def test_cache_saving_is_cached_tokens_at_the_input_rate_minus_at_the_cached_rate() -> None:
    """The saving of 6000 cached tokens at $3 input and $0.30 cached is 6000 × $2.70 per million."""
    rates = rates_from_pricing(Pricing(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75))
    usage = Usage(input_tokens=10_000, output_tokens=100, cached_input_tokens=6_000, cache_write_tokens=1_000)
    assert rates.cache_saving(usage) == pytest.approx(6_000 * 2.7 / M)
    uncached = Usage(input_tokens=10_000, output_tokens=100)
    assert rates.cost(uncached) - rates.cost(usage) + 1_000 * (3.75 - 3.0) / M == pytest.approx(
        rates.cache_saving(usage)
    )


def test_without_a_cached_rate_nothing_is_saved() -> None:
    """A profile pricing cached input like plain input saves nothing; no cached tokens save nothing."""
    rates = rates_from_pricing(Pricing(input=3.0, output=15.0))
    assert rates.cache_saving(Usage(input_tokens=100, cached_input_tokens=90)) == 0.0
    own = rates_from_pricing(Pricing(input=3.0, output=15.0, cached_input=0.3))
    assert own.cache_saving(Usage(input_tokens=100)) == 0.0


def test_cache_saving_uses_the_tier_of_the_whole_prompt() -> None:
    """A long prompt past a tier boundary saves at that tier's input and cached rates."""
    rates = Rates(input=_Rate(1.0, ((200_000, 2.0),)), output=_Rate(1.0), cached_input=_Rate(0.1, ((200_000, 0.2),)))
    assert rates.cache_saving(Usage(input_tokens=300_000, cached_input_tokens=100_000)) == pytest.approx(
        100_000 * 1.8 / M
    )


class _Listed(Catalogue):
    def rates(self, family: str, model: str) -> Rates | None:
        return Rates(input=_Rate(9.0), output=_Rate(9.0), cached_input=_Rate(1.0)) if family == "openai" else None


def test_profile_rates_prefer_the_profile_pricing_then_the_catalogue() -> None:
    """A profile's own pricing wins; without it the catalogue prices its family; an unknown profile has none."""
    rates = ProfileRates(
        {"openai.own": Pricing(input=2.0, output=4.0, cached_input=0.5), "openai.cat": None}, _Listed()
    )
    own, listed = rates.rates("openai.own", "m"), rates.rates("openai.cat", "m")
    assert own is not None and own.input.base == 2.0
    assert listed is not None and listed.input.base == 9.0
    assert rates.rates("openai.unknown", "m") is None
