"""Prices and context windows: profile overrides, tiers, cache pricing, the catalogue and its cache."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import genai_prices
import genai_prices.data_snapshot
import pytest
from genai_prices.types import ModelPrice, Tier, TieredPrices

from turnout.config.schema import Pricing
from turnout.core.types import Usage
from turnout.ledger.pricing import Catalogue, Rates, _Rate, default_catalogue, rates_from_pricing
from turnout.state import MemoryStore
from turnout.walk.keys import KeyPool
from turnout.walk.reliable import Entry, ReliableProvider

M = 1_000_000


# --- rates --------------------------------------------------------------------------------------


def test_profile_pricing_prices_input_and_output_per_million_tokens() -> None:
    """A profile's pricing table gives USD per million input and output tokens."""
    rates = rates_from_pricing(Pricing(input=3.0, output=15.0))
    assert rates.cost(Usage(input_tokens=M, output_tokens=M)) == pytest.approx(18.0)
    assert rates.cost(Usage(input_tokens=1000, output_tokens=500)) == pytest.approx((1000 * 3 + 500 * 15) / M)
    assert rates.cost(Usage()) == 0.0


def test_cached_input_and_cache_writes_are_priced_apart_from_plain_input() -> None:
    """Cache reads and writes (part of input_tokens) pay their own rates; only the rest pays the input rate."""
    rates = rates_from_pricing(Pricing(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75))
    usage = Usage(input_tokens=10_000, output_tokens=100, cached_input_tokens=6_000, cache_write_tokens=1_000)
    assert rates.cost(usage) == pytest.approx((3_000 * 3.0 + 100 * 15.0 + 6_000 * 0.3 + 1_000 * 3.75) / M)


def test_without_a_cache_rate_cached_tokens_pay_the_input_rate() -> None:
    """With no cached_input or cache_write rate, those tokens are plain input."""
    rates = rates_from_pricing(Pricing(input=2.0, output=8.0))
    usage = Usage(input_tokens=10_000, output_tokens=0, cached_input_tokens=6_000, cache_write_tokens=1_000)
    assert rates.cost(usage) == pytest.approx(10_000 * 2.0 / M)
    only_reads = rates_from_pricing(Pricing(input=2.0, output=8.0, cached_input=0.5))
    assert only_reads.cost(usage) == pytest.approx((4_000 * 2.0 + 6_000 * 0.5) / M)


def test_inconsistent_usage_never_prices_negative_input() -> None:
    """Cached tokens reported above the input count do not make plain input negative."""
    rates = rates_from_pricing(Pricing(input=3.0, output=15.0, cached_input=0.3))
    assert rates.cost(Usage(input_tokens=100, cached_input_tokens=500)) == pytest.approx(500 * 0.3 / M)


def test_a_tier_rate_applies_to_the_whole_count_above_its_start() -> None:
    """Above a tier's start every token pays the tier rate (a cliff, not a marginal rate); at it, the base."""
    rate = _Rate(3.0, ((200_000, 6.0), (1_000_000, 9.0)))
    assert [rate.at(n) for n in (0, 200_000, 200_001, 1_000_000, 1_000_001)] == [3.0, 3.0, 6.0, 6.0, 9.0]
    assert _Rate(3.0).at(10**9) == 3.0


def test_tiers_follow_the_total_input_for_every_kind_of_token() -> None:
    """With tiers, output, cache reads and cache writes all pay the tier picked by the total input."""
    rates = Rates(
        input=_Rate(3.0, ((200_000, 6.0),)),
        output=_Rate(15.0, ((200_000, 22.5),)),
        cached_input=_Rate(0.3, ((200_000, 0.6),)),
        cache_write=_Rate(3.75, ((200_000, 7.5),)),
    )
    small = Usage(input_tokens=200_000, output_tokens=1_000, cached_input_tokens=100_000, cache_write_tokens=50_000)
    large = Usage(input_tokens=250_000, output_tokens=1_000, cached_input_tokens=100_000, cache_write_tokens=50_000)
    assert rates.cost(small) == pytest.approx((50_000 * 3.0 + 1_000 * 15.0 + 100_000 * 0.3 + 50_000 * 3.75) / M)
    assert rates.cost(large) == pytest.approx((100_000 * 6.0 + 1_000 * 22.5 + 100_000 * 0.6 + 50_000 * 7.5) / M)


def test_one_tiered_rate_switches_off_the_flat_shortcut_for_all() -> None:
    """A model with a tier only on output still prices input flat and output by tier."""
    rates = Rates(input=_Rate(1.0), output=_Rate(2.0, ((100, 4.0),)), cached_input=_Rate(0.5))
    usage = Usage(input_tokens=150, output_tokens=10, cached_input_tokens=50)
    assert rates.cost(usage) == pytest.approx((100 * 1.0 + 10 * 4.0 + 50 * 0.5) / M)


# --- the walk prices with the profile's table first ----------------------------------------------


def _walk_over(entry_rates: Rates | None, catalogue: Catalogue) -> tuple[ReliableProvider, Entry]:
    store = MemoryStore()
    entry = Entry(
        profile="openai.main", model="gpt-4o", providers=(), keys=KeyPool("openai.main", [], store), rates=entry_rates
    )
    return ReliableProvider([entry], store=store, catalogue=catalogue), entry


def test_profile_pricing_overrides_the_catalogue() -> None:
    """An attempt on a profile with pricing costs the profile's rates; without, the catalogue's."""
    catalogue = FakeCatalogue({("openai", "gpt-4o"): (Rates(input=_Rate(100.0), output=_Rate(100.0)), None)})
    usage = Usage(input_tokens=1_000, output_tokens=1_000)
    walk, entry = _walk_over(rates_from_pricing(Pricing(input=1.0, output=2.0)), catalogue)
    assert walk.context.cost(entry, "gpt-4o", usage) == pytest.approx(3_000 / M)
    walk, entry = _walk_over(None, catalogue)
    assert walk.context.cost(entry, "gpt-4o", usage) == pytest.approx(200_000 / M)
    assert walk.context.cost(entry, "unlisted", usage) is None
    assert walk.context.cost(entry, "gpt-4o", None) is None


class FakeCatalogue(Catalogue):
    """Answers from a fixed table."""

    def __init__(self, table: dict[tuple[str, str], tuple[Rates | None, int | None]]) -> None:
        super().__init__()
        self.table = table

    def rates(self, family: str, model: str) -> Rates | None:
        return self.table.get((family, model), (None, None))[0]

    def context_window(self, family: str, model: str) -> int | None:
        return self.table.get((family, model), (None, None))[1]


# --- the catalogue ----------------------------------------------------------------------------------


@dataclass
class FakeModel:
    """A catalogue model: its context window and its prices."""

    context_window: int | None
    prices: ModelPrice | None

    def get_prices(self, when: datetime) -> ModelPrice:
        if self.prices is None:
            raise LookupError("no price for that date")
        return self.prices


class FakeSnapshot:
    """A catalogue snapshot: models by (provider id, model); provider id None matches any provider."""

    def __init__(self, models: dict[tuple[str, str], FakeModel]) -> None:
        self.models = models
        self.lookups: list[tuple[str, str | None]] = []

    def find_provider_model(self, model: str, provider: Any, provider_id: str | None, url: Any) -> tuple[Any, Any]:
        self.lookups.append((model, provider_id))
        for (pid, name), info in self.models.items():
            if name == model and provider_id in (pid, None):
                return object(), info
        raise LookupError(model)


@pytest.fixture
def snapshot(monkeypatch: pytest.MonkeyPatch) -> FakeSnapshot:
    tiered = TieredPrices(base=Decimal("3"), tiers=[Tier(start=200_000, price=Decimal("6"))])
    fake = FakeSnapshot(
        {
            ("anthropic", "claude-x"): FakeModel(
                200_000,
                ModelPrice(
                    input_mtok=tiered,
                    output_mtok=Decimal("15"),
                    cache_read_mtok=Decimal("0.3"),
                    cache_write_mtok=Decimal("3.75"),
                ),
            ),
            ("openai", "gpt-x"): FakeModel(128_000, ModelPrice(input_mtok=Decimal("2.5"), output_mtok=Decimal("10"))),
            ("deepseek", "deepseek-r1"): FakeModel(
                64_000, ModelPrice(input_mtok=Decimal("0.55"), output_mtok=Decimal("2.19"))
            ),
            ("zai", "glm-x"): FakeModel(None, ModelPrice(input_mtok=Decimal("0.6"), output_mtok=Decimal("2.2"))),
            ("openai", "undated"): FakeModel(32_000, None),
            ("openai", "no-output-price"): FakeModel(8_000, ModelPrice(input_mtok=Decimal("1"))),
        }
    )
    monkeypatch.setattr(genai_prices.data_snapshot, "get_snapshot", lambda: fake)
    return fake


def test_catalogue_turns_listed_prices_into_rates_with_tiers(snapshot: FakeSnapshot) -> None:
    """A listed model gets float rates (tiers kept, cache rates included) and its context window."""
    catalogue = Catalogue()
    rates = catalogue.rates("anthropic", "claude-x")
    assert rates == Rates(
        input=_Rate(3.0, ((200_000, 6.0),)), output=_Rate(15.0), cached_input=_Rate(0.3), cache_write=_Rate(3.75)
    )
    assert catalogue.context_window("anthropic", "claude-x") == 200_000
    assert catalogue.rates("openai", "gpt-x") == Rates(input=_Rate(2.5), output=_Rate(10.0))


def test_catalogue_looks_a_family_up_by_its_catalogue_id_then_anywhere(snapshot: FakeSnapshot) -> None:
    """The gemini family is looked up as google; an unlisted family falls back to any provider listing the model."""
    Catalogue().rates("gemini", "gemini-x")
    assert snapshot.lookups == [("gemini-x", "google"), ("gemini-x", None)]
    assert Catalogue().rates("zai", "glm-x") == Rates(input=_Rate(0.6), output=_Rate(2.2))


def test_unknown_models_have_no_rates_and_no_window(snapshot: FakeSnapshot) -> None:
    """A model the catalogue does not list is None for prices and context window."""
    catalogue = Catalogue()
    assert catalogue.rates("openai", "nope") is None
    assert catalogue.context_window("openai", "nope") is None


def test_a_model_without_a_usable_price_keeps_its_window(snapshot: FakeSnapshot) -> None:
    """No price for today, or no output price: no rates, but the context window is still known."""
    catalogue = Catalogue()
    assert (catalogue.rates("openai", "undated"), catalogue.context_window("openai", "undated")) == (None, 32_000)
    pair = (catalogue.rates("openai", "no-output-price"), catalogue.context_window("openai", "no-output-price"))
    assert pair == (None, 8_000)


def test_a_local_family_is_never_priced_from_the_catalogue(snapshot: FakeSnapshot) -> None:
    """Ollama models are not in the catalogue: a local deepseek-r1 gets no cloud price and no cloud window."""
    catalogue = Catalogue()
    assert catalogue.rates("ollama", "deepseek-r1") is None
    assert catalogue.context_window("ollama", "deepseek-r1") is None
    assert snapshot.lookups == []


def test_catalogue_resolves_each_model_once_also_when_unknown(snapshot: FakeSnapshot) -> None:
    """Each (family, model) is looked up once; later prices and windows (even a miss) come from the cache."""
    catalogue = Catalogue()
    for _ in range(3):
        catalogue.rates("openai", "gpt-x")
        catalogue.context_window("openai", "gpt-x")
        catalogue.rates("openai", "nope")
        catalogue.context_window("openai", "nope")
    assert len(snapshot.lookups) == len(set(snapshot.lookups))  # no lookup was repeated
    assert {m for m, _ in snapshot.lookups} == {"gpt-x", "nope"}
    assert catalogue.rates("openai", "gpt-x") is catalogue.rates("openai", "gpt-x")


def test_the_same_model_of_two_families_is_resolved_apart(snapshot: FakeSnapshot) -> None:
    """The cache is keyed by family and model: one family's answer is not reused for another."""
    catalogue = Catalogue()
    assert catalogue.context_window("openai", "deepseek-r1") == 64_000  # found via any provider
    assert catalogue.context_window("ollama", "deepseek-r1") is None


def test_default_catalogue_is_one_shared_instance() -> None:
    """The process-wide catalogue is one object (its cache is shared)."""
    assert default_catalogue() is default_catalogue()


# --- the bundled catalogue (no network: genai-prices ships its data) ---------------------------------


@pytest.mark.parametrize(
    ("family", "provider_id", "model"),
    [
        ("anthropic", "anthropic", "claude-sonnet-4-5"),
        ("openai", "openai", "gpt-4o"),
        ("gemini", "google", "gemini-2.5-pro"),
    ],
)
def test_bundled_catalogue_costs_match_genai_prices(family: str, provider_id: str, model: str) -> None:
    """Our cached float rates price usage exactly as genai-prices does, tiers and cache tokens included."""
    rates = Catalogue().rates(family, model)
    assert rates is not None
    for usage in (
        Usage(input_tokens=250_000, output_tokens=1_000, cached_input_tokens=50_000, cache_write_tokens=10_000),
        Usage(input_tokens=1_000, output_tokens=100, cached_input_tokens=200),
        Usage(input_tokens=200_000, output_tokens=10),
    ):
        reference = genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cached_input_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
            model,
            provider_id=provider_id,
        )
        assert rates.cost(usage) == pytest.approx(float(reference.total_price))


def test_bundled_catalogue_knows_context_windows_and_not_unknown_models() -> None:
    """A listed model has a positive context window; an invented one has neither rates nor window."""
    catalogue = Catalogue()
    window = catalogue.context_window("anthropic", "claude-sonnet-4-5")
    assert window is not None and window > 0
    assert catalogue.rates("openai", "no-such-model-zz9") is None
    assert catalogue.context_window("openai", "no-such-model-zz9") is None
