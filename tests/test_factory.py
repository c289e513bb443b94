"""The factory: adapters, key pools, walks and routers built once from the configuration."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fakes import FakeClock, Scripted
from turnout.config import load_config_toml
from turnout.config.schema import Pricing, Profile
from turnout.core.environment import Environment
from turnout.core.errors import ConfigError
from turnout.core.secrets import key_id
from turnout.factory import Factory, missing_model_error
from turnout.ledger.pricing import rates_from_pricing
from turnout.providers.http import HttpClient
from turnout.state import MemoryStore
from turnout.walk.reliable import ReliableProvider

CONFIG = """
default_provider = "anthropic.prod"
[providers.models.anthropic.prod]
api_keys = ["sk-a1", "sk-a2"]
model = "claude-sonnet-4-5"
fallback_models = ["claude-haiku-4-5"]
fallback = ["openai.backup", "ollama.local"]
refusal_fallback = true
context_window = 200000
pricing = { input = 3.0, output = 15.0, cached_input = 0.3 }
[providers.models.openai.backup]
api_key = "sk-o"
model = "gpt-4.1"
fallback = ["openai.free"]
[providers.models.openai.free]
api_key = "sk-free"
[providers.models.ollama.local]
model = "llama3"
[providers.models.gemini.side]
api_key = "sk-g"
model = "gemini-2.5-pro"
fallback = ["openai.backup"]
[[model_routes]]
hint = "side"
model_provider = "gemini.side"
model = "ignored-by-the-pin"
api_key = "sk-route"
[reliability]
provider_retries = 1
provider_backoff_ms = 200
"""


class Builder:
    """An adapter builder that counts how often each (profile, key) is built."""

    def __init__(self) -> None:
        self.built: Counter[tuple[str, str | None]] = Counter()
        self.adapters: dict[tuple[str, str | None], Scripted] = {}

    def __call__(self, name: str, profile: Profile, key: str | None) -> Scripted:
        self.built[(name, key)] += 1
        adapter = self.adapters[(name, key)] = Scripted(name=name)
        return adapter


def factory(text: str = CONFIG, **options: Any) -> tuple[Factory, Builder]:
    builder = Builder()
    clock = FakeClock()
    f = Factory(load_config_toml(text, env={}), adapter_builder=builder, env=clock.env, **options)
    return f, builder


def order(walk: ReliableProvider) -> list[tuple[str, str | None]]:
    return [(e.profile, e.model) for e in walk.entries]


DEFAULT_ORDER = [
    ("anthropic.prod", "claude-sonnet-4-5"),
    ("anthropic.prod", "claude-haiku-4-5"),
    ("openai.backup", "gpt-4.1"),
    ("openai.free", None),  # no model: unpinned, it forwards the caller's model
    ("ollama.local", "llama3"),
]


# --- walks ---------------------------------------------------------------------------------------


def test_the_default_walk_follows_the_materialised_order_with_pins() -> None:
    """The active profile's walk has the graph's depth-first order: primary, fallback models, fallbacks."""
    f, _ = factory()
    assert order(f.router().default) == DEFAULT_ORDER


def test_a_route_walk_follows_its_target_order() -> None:
    """A hint's walk starts at its target profile (pinned to its own model) and follows its fallbacks."""
    f, _ = factory()
    side = f.router().resolve("hint:side").reliable
    assert order(side) == [("gemini.side", "gemini-2.5-pro"), ("openai.backup", "gpt-4.1"), ("openai.free", None)]


def test_each_entry_carries_its_own_profiles_options() -> None:
    """refusal_fallback, context_window and pricing come from each entry's own profile, never a parent's."""
    f, _ = factory()
    prod, haiku, backup, free, local = f.router().default.entries
    expected = rates_from_pricing(Pricing(input=3.0, output=15.0, cached_input=0.3))
    for e in (prod, haiku):
        assert (e.refusal_fallback, e.context_window, e.rates) == (True, 200_000, expected)
    for e in (backup, free, local):
        assert (e.refusal_fallback, e.context_window, e.rates) == (False, None, None)


def test_walks_get_the_reliability_settings_and_the_injected_time() -> None:
    """Walks use [reliability] retries and backoff, and the factory's clock, sleep, jitter and store."""
    clock = FakeClock()
    store = MemoryStore()
    builder = Builder()
    f = Factory(
        load_config_toml(CONFIG, env={}),
        adapter_builder=builder,
        store=store,
        env=Environment(clock=clock, sleep=clock.sleep, jitter=lambda: 0.25),
    )
    router = f.router()
    for walk, name in ((router.default, "anthropic.prod"), (router.resolve("hint:side").reliable, "side")):
        context = walk.context
        assert (context.tries, context.base_backoff, walk.name) == (2, 0.2, name)
        assert context.env.clock is clock and context.env.sleep == clock.sleep and context.env.jitter() == 0.25
        assert context.store is store and context.catalogue is f.catalogue


# --- adapters and key pools ----------------------------------------------------------------------


def test_adapters_are_built_once_per_profile_and_key_and_shared() -> None:
    """However many routers, walks and entries use a (profile, key), its adapter is built once and shared."""
    f, builder = factory()
    router = f.router()
    f.router()
    f.router(model="claude-opus-4-1")
    f.router("openai.backup")
    f.router("gemini.side")
    assert set(builder.built.values()) == {1}
    assert set(builder.built) == {
        ("anthropic.prod", "sk-a1"),
        ("anthropic.prod", "sk-a2"),
        ("openai.backup", "sk-o"),
        ("openai.free", "sk-free"),
        ("ollama.local", None),
        ("gemini.side", "sk-route"),
    }
    default, side = router.default, router.resolve("hint:side").reliable
    assert default.entries[0].providers == default.entries[1].providers  # one profile, one set of adapters
    assert (
        default.entries[2].providers[0] is side.entries[1].providers[0] is builder.adapters[("openai.backup", "sk-o")]
    )
    assert f.adapter("openai.backup", "sk-o") is builder.adapters[("openai.backup", "sk-o")]


def test_a_key_pool_gives_one_adapter_per_key_and_one_pool_per_profile() -> None:
    """A pooled profile's entries share one rotating pool, with one adapter per key in pool order."""
    f, builder = factory()
    prod, haiku = f.router().default.entries[:2]
    assert prod.keys is haiku.keys
    assert prod.keys.ids == (key_id("sk-a1"), key_id("sk-a2")) and prod.keys.rotates
    assert prod.providers == (
        builder.adapters[("anthropic.prod", "sk-a1")],
        builder.adapters[("anthropic.prod", "sk-a2")],
    )
    assert f.pool("anthropic.prod", ["sk-a1", "sk-a2"]) is prod.keys


def test_a_profile_with_one_key_or_none_does_not_rotate() -> None:
    """A single key is a pool that does not rotate; a keyless local profile gets one adapter without a key."""
    f, builder = factory()
    backup, _, local = f.router().default.entries[2:]
    assert backup.keys.ids == (key_id("sk-o"),) and not backup.keys.rotates
    assert local.keys.ids == () and not local.keys.rotates
    assert local.providers == (builder.adapters[("ollama.local", None)],)


def test_pools_are_shared_between_walks() -> None:
    """A profile reached by two walks with the same keys has one pool (its cooldowns and dead keys are shared)."""
    f, _ = factory()
    router = f.router()
    backup_in_default = router.default.entries[2]
    backup_in_side = router.resolve("hint:side").reliable.entries[1]
    assert backup_in_default.keys is backup_in_side.keys


def test_a_route_key_replaces_the_target_profiles_key_only() -> None:
    """The route's api_key binds its target's entries; the target's fallbacks keep their own keys."""
    f, builder = factory()
    side = f.router().resolve("hint:side").reliable
    target, backup, free = side.entries
    assert target.keys.ids == (key_id("sk-route"),)
    assert target.providers == (builder.adapters[("gemini.side", "sk-route")],)
    assert (backup.keys.ids, free.keys.ids) == ((key_id("sk-o"),), (key_id("sk-free"),))
    assert ("gemini.side", "sk-g") not in builder.built  # the profile's own key is replaced, never used


def test_the_builder_gets_each_profiles_own_settings() -> None:
    """Each adapter is built from its own profile's configuration, not the profile that names it."""
    seen: dict[str, Profile] = {}

    def build(name: str, profile: Profile, key: str | None) -> Scripted:
        seen[name] = profile
        return Scripted(name=name)

    config = load_config_toml(CONFIG, env={})
    Factory(config, adapter_builder=build).router()
    assert seen == {name: config.profiles()[name] for name in seen}
    assert set(seen) == {"anthropic.prod", "openai.backup", "openai.free", "ollama.local", "gemini.side"}


# --- routers -------------------------------------------------------------------------------------


def test_routers_are_cached_per_active_profile_and_model() -> None:
    """The same (profile, model) gives the same router; another model or profile gets its own."""
    f, _ = factory()
    assert f.router() is f.router()
    assert f.router(model="claude-opus-4-1") is f.router(model="claude-opus-4-1")
    assert f.router(model="claude-opus-4-1") is not f.router()
    assert f.router("openai.backup") is not f.router()


def test_a_model_override_pins_the_active_profile_and_keeps_its_fallbacks() -> None:
    """router(model=...) pins the active profile's first entry; the rest of the order is unchanged."""
    f, _ = factory()
    router = f.router(model="claude-opus-4-1")
    assert router.default_model == "claude-opus-4-1"
    assert order(router.default) == [("anthropic.prod", "claude-opus-4-1"), *DEFAULT_ORDER[1:]]


def test_another_active_profile_walks_from_that_profile() -> None:
    """router(profile) makes that profile the active one (its walk starts there); routes stay available."""
    f, _ = factory()
    router = f.router("openai.backup")
    assert order(router.default) == [("openai.backup", "gpt-4.1"), ("openai.free", None)]
    assert router.default_model == "gpt-4.1"
    assert router.resolve("hint:side").reliable is f.router().resolve("hint:side").reliable


def test_the_same_target_and_credential_share_one_walk_across_routers() -> None:
    """Making the route's target active reuses the route's walk (same entries, same route credential)."""
    f, _ = factory()
    assert f.router("gemini.side").default is f.router().resolve("hint:side").reliable


def test_the_router_cache_is_bounded() -> None:
    """Past 256 cached routers the oldest is dropped (rebuilt on demand, its adapters still shared)."""
    f, builder = factory()
    first = f.router(model="m-0")
    for i in range(1, 257):
        f.router(model=f"m-{i}")
    assert f.router(model="m-256") is f.router(model="m-256")
    rebuilt = f.router(model="m-0")
    assert rebuilt is not first and order(rebuilt.default) == order(first.default)
    assert set(builder.built.values()) == {1}


def test_an_unknown_profile_is_a_config_error() -> None:
    """Asking for a profile that is not configured fails with a typed error."""
    f, _ = factory()
    with pytest.raises(ConfigError) as info:
        f.router("openai.nope")
    assert info.value.code == "unknown_profile"


def test_missing_model_error_names_the_profile_and_the_fix() -> None:
    """The error for an unpinned profile called without a model says which profile and how to fix it."""
    error = missing_model_error("openai.free")
    assert error.code == "missing_model"
    assert "openai.free" in str(error) and "[providers.models.openai.free]" in str(error)


# --- closing ---------------------------------------------------------------------------------------


class ClosingStore(MemoryStore):
    """A memory store that remembers being closed."""

    closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_aclose_closes_the_shared_http_session_and_the_store() -> None:
    """Closing the factory closes its one HTTP session and its state store."""
    http, store = HttpClient(), ClosingStore()
    f, _ = factory(http=http, store=store)
    session = http.session()
    await f.aclose()
    assert session.closed and store.closed == 1


async def test_aclose_of_a_factory_that_made_its_own_session() -> None:
    """A factory given no HTTP client creates one and closes it."""
    f, _ = factory()
    session = f.http.session()
    await f.aclose()
    assert session.closed


@pytest.mark.parametrize(
    ("extra", "walks_have_them"),
    [
        ("", True),
        ("[reliability.breaker]\nenabled = false\n", False),
        ("[reliability.breaker]\nenabled = false\n[providers.models.openai.backup.breaker]\nenabled = true\n", True),
    ],
    ids=["default", "disabled", "disabled-but-one-profile"],
)
def test_walks_get_the_breakers_only_when_some_entry_has_one(extra: str, walks_have_them: bool) -> None:
    """With every breaker disabled the walks carry none (no bookkeeping on any call); else they share one registry."""
    f, _ = factory(CONFIG + extra)
    walks = f.router().targets()
    assert len(walks) == 2
    assert all((w.context.breakers is f.breakers) is walks_have_them for w in walks)
    assert all((w.context.breakers is None) is not walks_have_them for w in walks)
