"""Building providers from a loaded configuration.

One adapter per (profile, key), shared by every entry and route that uses it, all on one HTTP session;
one key pool per (profile, credentials); one headroom book per profile, which every pool of the profile
shares and every adapter of the profile reports to; one reliable walk per materialised route; one router per
active profile and model. Everything here happens once, at construction, never per call.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from turnout.config.graph import EntrySpec, Plan, Route, build_plan, pool_specs, profile_credentials
from turnout.config.schema import Config, Profile
from turnout.core.environment import REAL, Environment
from turnout.core.errors import ConfigError
from turnout.core.provider import Provider
from turnout.core.secrets import Secret
from turnout.ledger.pricing import Catalogue, default_catalogue, rates_from_pricing
from turnout.providers import HTTPAdapter, build_adapter
from turnout.providers.headroom import HeadroomBook
from turnout.providers.http import HttpClient
from turnout.state import MemoryStore, StateStore
from turnout.walk.affinity import Affinity
from turnout.walk.breaker import BreakerSettings
from turnout.walk.breakers import Breakers
from turnout.walk.context import MAX_COOLDOWN_S
from turnout.walk.hedge import HedgeSettings, Hedging
from turnout.walk.keys import KeyPool
from turnout.walk.pools import Pool
from turnout.walk.reliable import Entry, ReliableProvider
from turnout.walk.router import Router
from turnout.walk.stats import Stats

#: Builds the provider for one profile and credential (the test seam: unit tests inject fakes).
AdapterBuilder = Callable[[str, Profile, str | None], Provider]


class Factory:
    """Turns a :class:`~turnout.config.Config` into routers, walks and adapters, caching each piece.

    Args:
        config: The loaded configuration.
        http: The shared HTTP client (created when not given).
        store: Cooldown and key state (in memory when not given).
        catalogue: Prices and context windows.
        adapter_builder: Replaces the HTTP adapters (tests).
        env: The clock, sleep and jitter of every walk (default: the real ones; tests inject fakes); its clock also
            times the key pools and the conversation pins.
        chance: A uniform random number in [0, 1) for the pools' choices (tests inject a fixed sequence).
    """

    def __init__(
        self,
        config: Config,
        *,
        http: HttpClient | None = None,
        store: StateStore | None = None,
        catalogue: Catalogue | None = None,
        adapter_builder: AdapterBuilder | None = None,
        env: Environment | None = None,
        chance: Callable[[], float] = random.random,
    ) -> None:
        self.config = config
        self.http = http if http is not None else HttpClient()
        self.store = store if store is not None else MemoryStore()
        self.catalogue = catalogue if catalogue is not None else default_catalogue()
        self._build = adapter_builder or (lambda name, profile, key: build_adapter(name, profile, self.http, key))
        #: Time and randomness, handed to every walk.
        self.env = env if env is not None else REAL
        self.breakers = breaker_registry(config, self.store)
        self.chance = chance
        self.hedging = hedging_of(config)
        self.pool_specs = pool_specs(config)
        pinning = config.reliability.affinity
        #: Conversations' pins to pool members, shared by every walk (only with pools).
        self.affinity = (
            Affinity(
                self.store, ttl=pinning.ttl_secs, max_conversations=pinning.max_conversations, clock=self.env.clock
            )
            if self.pool_specs and pinning.enabled
            else None
        )
        #: Calls in flight and times to first token per entry, kept (by every walk) only when something needs
        #: them: pools, or hedging (after "auto").
        self.stats: Stats | None = Stats() if self.pool_specs or self.hedging.enabled else None
        self._adapters: dict[tuple[str, str | None], Provider] = {}
        self._pools: dict[tuple[str, tuple[str, ...]], KeyPool] = {}
        #: The headroom last announced per profile and key (this process).
        self.books: dict[str, HeadroomBook] = {}
        self._reliables: dict[tuple[tuple[str | None, ...], ...], ReliableProvider] = {}
        self._routers: dict[tuple[str | None, str | None], Router] = {}

    def adapter(self, profile: str, key: str | None) -> Provider:
        """The adapter for ``profile`` bound to ``key`` (built once)."""
        cache_key = (profile, key)
        adapter = self._adapters.get(cache_key)
        if adapter is None:
            adapter = self._build(profile, self.config.profiles()[profile], key)
            self._adapters[cache_key] = adapter
        return adapter

    def pool(self, profile: str, keys: Sequence[str]) -> KeyPool:
        """The key pool of ``profile`` with these credentials (shared by all its entries)."""
        cache_key = (profile, tuple(keys))
        pool = self._pools.get(cache_key)
        if pool is None:
            book = self.books.get(profile)
            if book is None:
                book = self.books[profile] = HeadroomBook(profile, max_cooldown=MAX_COOLDOWN_S)
            pool = KeyPool(profile, keys, self.store, self.env.clock, book=book)
            self._pools[cache_key] = pool
        return pool

    def watched(self, adapter: Provider, pool: KeyPool, kid: str | None) -> Provider:
        """``adapter``, reading its answers' headroom for ``pool`` (an adapter shared by pools keeps its first)."""
        if isinstance(adapter, HTTPAdapter) and adapter.headroom is None:
            adapter.headroom = pool.watch(kid)
        return adapter

    def entries(self, specs: Sequence[EntrySpec], root: str, root_key: Secret | None = None) -> list[Entry]:
        """Bind each entry to its profile's adapters and key pool.

        ``root_key`` (a route's ``api_key``) replaces the credentials of the root profile only.
        """
        out = []
        profiles = self.config.profiles()
        pools = self.pool_orders(specs)
        for spec, pool in zip(specs, pools, strict=True):
            profile = profiles[spec.profile]
            if root_key is not None and spec.profile == root:
                keys = [root_key.reveal()]
            else:
                keys = [k.reveal() for k in profile_credentials(self.config, spec.profile)]
            key_pool = self.pool(spec.profile, keys)
            adapters = tuple(
                self.watched(self.adapter(spec.profile, k), key_pool, kid)
                for k, kid in zip(keys, key_pool.ids, strict=True)
            ) or (self.watched(self.adapter(spec.profile, None), key_pool, None),)
            out.append(
                Entry(
                    profile=spec.profile,
                    model=spec.model,
                    providers=adapters,
                    keys=key_pool,
                    refusal_fallback=profile.refusal_fallback,
                    context_window=profile.context_window,
                    max_tokens=profile.max_tokens,
                    rates=rates_from_pricing(profile.pricing) if profile.pricing is not None else None,
                    pool=pool,
                )
            )
        return out

    def pool_orders(self, specs: Sequence[EntrySpec]) -> list[Pool | None]:
        """The :class:`~turnout.walk.pools.Pool` each entry stands in (None: it stands alone), aligned with ``specs``.

        A pool's entries come in tiers (its members' first entries, then their second ones, ...): each tier gets
        its own :class:`Pool`, so the walk arranges the members within a tier and tries the tiers in turn.
        """
        out: list[Pool | None] = []
        tier: list[EntrySpec] = []

        def close() -> None:
            if tier:
                out.extend([self._pool(tier)] * len(tier))
                tier.clear()

        for spec in specs:
            if tier and (spec.pool != tier[0].pool or any(e.profile == spec.profile for e in tier)):
                close()
            if spec.pool is None:
                out.append(None)
            else:
                tier.append(spec)
        close()
        return out

    def _pool(self, tier: Sequence[EntrySpec]) -> Pool:
        """The order of one tier of a pool: one entry per member."""
        name = tier[0].pool
        assert name is not None
        spec = self.pool_specs[name]
        return Pool(
            name,
            spec.strategy,
            keys={e.profile: None if e.model is None else (f"{e.profile}/{e.model}",) for e in tier},
            weights=dict(zip(spec.members, spec.weights, strict=True)),
            explore=spec.explore,
            chance=self.chance,
        )

    def reliable(self, route: Route) -> ReliableProvider:
        """The reliable provider over a route's entries (one per distinct entry list and credential)."""
        cache_key = (
            ("", route.credential.id if route.credential else None),
            *((e.profile, e.model, e.pool) for e in route.entries),
        )
        reliable = self._reliables.get(cache_key)
        if reliable is None:
            rel = self.config.reliability
            reliable = ReliableProvider(
                self.entries(route.entries, route.profile, route.credential),
                provider_retries=rel.provider_retries,
                provider_backoff_ms=rel.provider_backoff_ms,
                store=self.store,
                catalogue=self.catalogue,
                env=self.env,
                name=route.hint or route.profile,
                breakers=self.breakers if self.breakers.active else None,
                stats=self.stats,
                hedging=self.hedging,
                affinity=self.affinity,
            )
            self._reliables[cache_key] = reliable
        return reliable

    def router_for_plan(self, plan: Plan) -> Router:
        """A router over a materialised plan; routes sharing a target share one reliable provider."""
        default = self.reliable(plan.default)
        routes = {}
        for r in plan.routes:
            reliable = default if r.entries is plan.default.entries else self.reliable(r)
            routes[r.hint or ""] = (reliable, r.model or "")
        return Router(default, plan.default.model, routes)

    def router(self, profile: str | None = None, model: str | None = None) -> Router:
        """The router with ``profile`` active and pinned to ``model`` (defaults from the config).

        Raises:
            ConfigError: The profile is unknown, or a profile it reaches has no credential.
        """
        cache_key = (profile, model)
        router = self._routers.get(cache_key)
        if router is None:
            if len(self._routers) >= 256:  # overrides are few in practice; bound the cache anyway
                self._routers.pop(next(iter(self._routers)))
            router = self.router_for_plan(build_plan(self.config, profile=profile, model=model))
            self._routers[cache_key] = router
        return router

    async def start(self) -> None:
        """Load the shared cooldown and key state before the first call (bounded; see :meth:`StateStore.start`)."""
        await self.store.start()

    async def aclose(self) -> None:
        """Close the shared HTTP session and the state store."""
        await self.http.aclose()
        await self.store.aclose()


def missing_model_error(profile: str) -> ConfigError:
    """The error for a call to an unpinned profile without a model."""
    return ConfigError(
        f"profile {profile} has no model; pass model=... or set model on [providers.models.{profile}]",
        code="missing_model",
    )


def breaker_registry(config: Config, store: StateStore) -> Breakers:
    """The circuit breakers of every entry: ``[reliability.breaker]``, with each profile's ``breaker`` on top.

    Raises:
        ConfigError: ``open_secs`` exceeds ``max_open_secs`` (the key path names the table).
    """
    base = config.reliability.breaker.settings()
    default = _breaker_settings(base, "reliability.breaker")
    profiles = {
        name: _breaker_settings(base | profile.breaker.settings(), f"providers.models.{name}.breaker")
        for name, profile in config.profiles().items()
        if profile.breaker is not None
    }
    return Breakers(store, default, profiles)


def _breaker_settings(values: dict[str, object], path: str) -> BreakerSettings:
    settings = BreakerSettings(**values)  # type: ignore[arg-type]  # the schema checked each value's type
    if settings.open_secs > settings.max_open_secs:
        raise ConfigError("open_secs must not exceed max_open_secs", path=path, code="invalid_breaker")
    return settings


def hedging_of(config: Config) -> Hedging:
    """Hedging: ``[reliability.hedge]``, with each profile's ``hedge`` table on top."""
    base = config.reliability.hedge.settings()
    profiles = {
        name: HedgeSettings(**(base | profile.hedge.settings()))
        for name, profile in config.profiles().items()
        if profile.hedge is not None
    }
    return Hedging(HedgeSettings(**base), profiles)
