"""Prices and context windows: the profile's own settings first, else the ``genai-prices`` catalogue.

Catalogue lookups are slow (Decimal arithmetic, model matching), so each (family, model) is resolved once
into float rates (with their long-context tiers) and cached; pricing an attempt is then a few
multiplications.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from turnout.config.schema import Config, Pricing
from turnout.core.model_ids import wire_model
from turnout.core.types import Usage

#: genai-prices provider ids per family (None: not in the catalogue).
FAMILY_CATALOGUE_IDS: dict[str, str | None] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "google": "google",
    "groq": "groq",
    "mistral": "mistral",
    "deepseek": "deepseek",
    "xai": "x-ai",
    "together": "together",
    "openrouter": "openrouter",
    "azure": "azure",
    "bedrock": "aws",
    "vertex": "google",
    "ollama": None,
}
#: Families whose model names are priced through the model catalogue (``turnout.core.model_ids``): a canonical name
#: is looked up as that cloud's own id, so ``claude-sonnet-4-5`` on Bedrock costs what Bedrock charges for it.
_CLOUDS = {"anthropic": "anthropic", "bedrock": "bedrock", "vertex": "vertex", "gemini": "gemini", "google": "gemini"}


@dataclass(frozen=True, slots=True)
class _Rate:
    """USD per million tokens, possibly tiered by total input tokens (the whole count pays the tier rate)."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, total_input: int) -> float:
        if not self.tiers:
            return self.base
        for start, price in reversed(self.tiers):
            if total_input > start:
                return price
        return self.base


@dataclass(frozen=True, slots=True)
class Rates:
    """A model's rates, USD per million tokens.

    ``input_only`` rates come from a catalogue entry without an output price (an embedding model's): they price
    embeddings (:meth:`Catalogue.embedding_rates`), never a chat, whose output would look free.
    """

    input: _Rate
    output: _Rate
    cached_input: _Rate | None = None
    cache_write: _Rate | None = None
    input_only: bool = False
    #: ``(input, output, cached, write)`` base rates when no rate is tiered (the cost is then four products).
    _flat: tuple[float, float, float | None, float | None] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rates = (self.input, self.output, self.cached_input, self.cache_write)
        flat = None
        if not any(r is not None and r.tiers for r in rates):
            cached, write = (r.base if r is not None else None for r in rates[2:])
            flat = (self.input.base, self.output.base, cached, write)
        object.__setattr__(self, "_flat", flat)

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage``; cached and cache-write tokens are priced apart from plain input."""
        total_in = usage.input_tokens
        flat = self._flat
        if flat is not None and not usage.cached_input_tokens and not usage.cache_write_tokens:
            # No cache tokens (most answers): the general sum below without its terms that are zero (same float).
            return ((total_in if total_in > 0 else 0) * flat[0] + usage.output_tokens * flat[1]) / 1_000_000
        if flat is not None:
            in_rate, out_rate, cached_rate, write_rate = flat
        else:
            in_rate, out_rate = self.input.at(total_in), self.output.at(total_in)
            cached_rate = self.cached_input.at(total_in) if self.cached_input is not None else None
            write_rate = self.cache_write.at(total_in) if self.cache_write is not None else None
        cached = usage.cached_input_tokens if cached_rate is not None else 0
        written = usage.cache_write_tokens if write_rate is not None else 0
        plain = total_in - cached - written
        cost = (plain if plain > 0 else 0) * in_rate + usage.output_tokens * out_rate
        if cached_rate is not None:
            cost += cached * cached_rate
        if write_rate is not None:
            cost += written * write_rate
        return cost / 1_000_000

    def cache_saving(self, usage: Usage) -> float:
        """What ``usage``'s cached input saved: those tokens at the input rate minus at the cached rate (USD).

        Zero without a cached rate (cached tokens then pay the input rate); cache writes are not a saving.
        """
        cached = usage.cached_input_tokens
        if not cached or self.cached_input is None:
            return 0.0
        total_in = usage.input_tokens
        return cached * (self.input.at(total_in) - self.cached_input.at(total_in)) / 1_000_000


def rates_from_pricing(p: Pricing) -> Rates:
    """Rates from a profile's ``pricing`` table."""
    return Rates(
        input=_Rate(p.input),
        output=_Rate(p.output),
        cached_input=_Rate(p.cached_input) if p.cached_input is not None else None,
        cache_write=_Rate(p.cache_write) if p.cache_write is not None else None,
    )


class ProfileRates:
    """The rates of each configured profile's models: its ``pricing`` table, else the catalogue's.

    What the gateway's counters and ``turnout ledger`` price a recorded attempt with after the fact (the call
    itself priced it the same way: :meth:`turnout.walk.reliable.Reliable.cost`).

    Args:
        profiles: Each profile's ``pricing`` table (None: priced from the catalogue), by ``family.alias``.
        catalogue: The catalogue (default: the process-wide one).
    """

    def __init__(self, profiles: Mapping[str, Pricing | None], catalogue: Catalogue | None = None) -> None:
        self._own = {name: rates_from_pricing(p) for name, p in profiles.items() if p is not None}
        self._known = frozenset(profiles)
        self._catalogue = catalogue if catalogue is not None else default_catalogue()

    def rates(self, profile: str, model: str) -> Rates | None:
        """The rates ``profile`` pays for ``model``; None for an unknown profile or an unpriced model."""
        own = self._own.get(profile)
        if own is not None:
            return own
        if profile not in self._known:
            return None
        return self._catalogue.rates(profile.partition(".")[0], model)


def _rate(value: Any) -> _Rate | None:
    if value is None:
        return None
    tiers = getattr(value, "tiers", None)
    if tiers is not None:
        return _Rate(float(value.base), tuple((int(t.start), float(t.price)) for t in tiers))
    return _Rate(float(value))


class Catalogue:
    """Cached lookups of model prices and context windows in ``genai-prices`` (loaded on first use)."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, str], tuple[Rates | None, int | None]] = {}
        self._lock = threading.Lock()

    def _lookup(self, family: str, model: str) -> tuple[Rates | None, int | None]:
        key = (family, model)
        hit = self._models.get(key)
        if hit is not None:
            return hit
        with self._lock:
            found = self._models.get(key) or self._resolve(family, model)
            self._models[key] = found
            return found

    @staticmethod
    def _resolve(family: str, model: str) -> tuple[Rates | None, int | None]:
        try:
            from genai_prices.data_snapshot import get_snapshot
        except ImportError:  # pragma: no cover - genai-prices is a dependency
            return None, None
        provider_id = FAMILY_CATALOGUE_IDS.get(family, family)
        if provider_id is None:  # a local family: searching every provider would price it as some cloud model
            return None, None
        cloud = _CLOUDS.get(family)
        if cloud is not None:
            model = wire_model(cloud, model)  # Bedrock: the foundation id, which genai-prices prices in-region
        snapshot = get_snapshot()
        info = None
        for pid in (provider_id, None) if provider_id else (None,):
            try:
                _, info = snapshot.find_provider_model(model, None, pid, None)
                break
            except LookupError:
                continue
        if info is None:
            return None, None
        window = getattr(info, "context_window", None)
        try:
            price = info.get_prices(datetime.now(UTC))
        except (LookupError, ValueError, AttributeError):
            return None, window
        inp = _rate(getattr(price, "input_mtok", None))
        out = _rate(getattr(price, "output_mtok", None))
        if inp is None:
            return None, window
        rates = Rates(
            input=inp,
            output=out if out is not None else _Rate(0.0),
            cached_input=_rate(getattr(price, "cache_read_mtok", None)),
            cache_write=_rate(getattr(price, "cache_write_mtok", None)),
            input_only=out is None,
        )
        return rates, window

    def rates(self, family: str, model: str) -> Rates | None:
        """The catalogue's rates for a model, or None when it is not listed (or lists no output price)."""
        rates = self._lookup(family, model)[0]
        return None if rates is None or rates.input_only else rates

    def embedding_rates(self, family: str, model: str) -> Rates | None:
        """The catalogue's rates for an embedding model, priced per input token (None: not listed)."""
        return self._lookup(family, model)[0]

    def context_window(self, family: str, model: str) -> int | None:
        """The catalogue's context window for a model, or None when unknown."""
        return self._lookup(family, model)[1]


_DEFAULT = Catalogue()


def default_catalogue() -> Catalogue:
    """The process-wide catalogue."""
    return _DEFAULT


def profile_rates(config: Config, catalogue: Catalogue | None = None) -> ProfileRates:
    """The :class:`ProfileRates` of ``config``'s profiles."""
    return ProfileRates({name: p.pricing for name, p in config.profiles().items()}, catalogue)
