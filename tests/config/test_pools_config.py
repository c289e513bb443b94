"""Pools in the configuration: validation with key paths, warnings, and how a pool materialises in the graph."""

from __future__ import annotations

import pytest

from turnout.config import Config, EntrySpec, build_plan, collect_warnings, load_config_toml, materialize
from turnout.core.errors import ConfigError

PROFILES = """
[providers.models.azure.east]
uri = "https://east.example/openai/deployments/gpt"
api_key = "sk-east"
model = "gpt-4.1"
fallback_models = ["gpt-4.1-mini"]
[providers.models.azure.west]
uri = "https://west.example/openai/deployments/gpt"
api_key = "sk-west"
model = "gpt-4.1"
fallback_models = ["gpt-4.1-mini", "gpt-4.1-nano"]
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
[providers.models.openai.open]
api_key = "sk-open"
[providers.models.anthropic.backup]
api_key = "sk-ant"
model = "claude-haiku-4-5"
"""

DEFAULT = 'default_provider = "openai.main"\n'

POOL = """
[pools.gpt]
members = ["azure.east", "west", "openai.main"]
strategy = "latency"
fallback = ["anthropic.backup"]
"""


def load(text: str) -> Config:
    return load_config_toml(text, env={})


def err(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value


def specs(entries: tuple[EntrySpec, ...]) -> list[tuple[str, str | None, str | None]]:
    return [(e.profile, e.model, e.pool) for e in entries]


# --- validation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "path", "code"),
    [
        ("members = []", "pools.p.members", "empty_pool"),
        ('members = ["azure.east", "azure.nowhere"]', "pools.p.members[1]", "unknown_pool_member"),
        ('members = ["azure.east", "  "]', "pools.p.members[1]", "unknown_pool_member"),
        ('members = ["azure.east", "p"]', "pools.p.members[1]", "nested_pool"),
        ('members = ["azure.east", "azure.west", "east"]', "pools.p.members[2]", "duplicate_pool_member"),
        ('members = ["azure.east"]\nweights = { "openai.main" = 2 }', 'pools.p.weights."openai.main"', None),
        ('members = ["azure.east"]\nweights = { ghost = 2 }', "pools.p.weights.ghost", "unknown_pool_weight"),
        (
            'members = ["azure.east", "azure.west"]\nweights = { "azure.east" = 1, east = 2 }',
            "pools.p.weights.east",
            "duplicate_pool_weight",
        ),
        ('members = ["azure.east", "west"]\nweights = { east = 0, west = 0 }', "pools.p.weights", None),
        ('members = ["azure.east"]\nweights = { east = -1 }', "pools.p.weights.east", "invalid_value"),
        ('members = ["azure.east"]\nstrategy = "fastest"', "pools.p.strategy", "invalid_value"),
        ('members = ["azure.east"]\nexplore = 0.9', "pools.p.explore", "invalid_value"),
        ('members = ["azure.east"]\nretries = 2', "pools.p.retries", "unknown_key"),
        ("strategy = 'ordered'", "pools.p.members", "missing_key"),
    ],
)
def test_a_bad_pool_fails_to_load_with_its_key_path(pool: str, path: str, code: str | None) -> None:
    """Empty pools, unknown, blank, nested and duplicate members, weights of non-members or all zero: key paths."""
    e = err(PROFILES + f"[pools.p]\n{pool}\n")
    assert e.path == path
    if code is not None:
        assert e.code == code


def test_a_pool_cannot_contain_itself() -> None:
    """A pool naming itself as a member says so."""
    e = err(PROFILES + '[pools.p]\nmembers = ["p"]\n')
    assert (e.path, e.code) == ("pools.p.members[0]", "nested_pool")
    assert "member of itself" in e.message


def test_a_pool_cannot_contain_another_pool() -> None:
    """Pools do not nest: naming another pool as a member is an error on that member."""
    e = err(PROFILES + '[pools.q]\nmembers = ["azure.west"]\n[pools.p]\nmembers = ["azure.east", "q"]\n')
    assert (e.path, e.code) == ("pools.p.members[1]", "nested_pool")
    assert "'q' is a pool" in e.message


def test_a_pool_named_like_a_profile_alias_is_an_error() -> None:
    """A pool and a profile alias with the same name would make a bare reference ambiguous."""
    e = err(PROFILES + '[pools.east]\nmembers = ["azure.west"]\n')
    assert (e.path, e.code) == ("pools.east", "pool_name_conflict")
    assert "azure.east" in e.message


def test_a_pool_name_with_a_dot_is_an_error() -> None:
    """``family.alias`` always names a profile: a pool's name has no dot."""
    e = err(PROFILES + '[pools."gpt.pool"]\nmembers = ["azure.west"]\n')
    assert (e.path, e.code) == ("pools.'gpt.pool'", "invalid_pool_name")


def test_a_route_to_a_pool_may_not_carry_a_key() -> None:
    """A route's api_key replaces one profile's key; a pool has several members, so it is an error."""
    route = '[[model_routes]]\nhint = "x"\nmodel_provider = "gpt"\nmodel = "m"\napi_key = "sk-r"\n'
    text = DEFAULT + PROFILES + POOL + route
    e = err(text)
    assert (e.path, e.code) == ("model_routes[0].api_key", "route_key_on_pool")
    assert "sk-r" not in str(e)


def test_unknown_default_sender_and_route_targets_mention_pools() -> None:
    """A reference to nothing configured says it names no profile or pool, with its key path."""
    e = err('default_provider = "ghost"\n' + PROFILES)
    assert (e.path, e.code) == ("default_provider", "unknown_profile")
    assert "profile or pool" in e.message
    e = err(DEFAULT + PROFILES + '[senders.vip]\nprovider = "ghost"\n')
    assert e.path == "senders.vip.provider"
    e = err(DEFAULT + PROFILES + '[[model_routes]]\nhint = "x"\nmodel_provider = "ghost"\nmodel = "m"\n')
    assert (e.path, e.code) == ("model_routes[0].model_provider", "invalid_route")


def test_a_pool_stands_as_default_route_target_sender_and_fallback() -> None:
    """default_provider, a route's model_provider, a sender's provider and a profile's fallback may name a pool."""
    text = (
        'default_provider = "gpt"\n'
        + PROFILES.replace('model = "claude-haiku-4-5"', 'model = "claude-haiku-4-5"\nfallback = ["gpt"]')
        + POOL.replace('fallback = ["anthropic.backup"]', "")
        + '[senders.vip]\nprovider = "gpt"\n'
        + '[[model_routes]]\nhint = "fast"\nmodel_provider = "gpt"\nmodel = "gpt-4.1"\n'
    )
    config = load(text)
    plan = build_plan(config)
    assert plan.default.profile == "gpt"
    assert plan.routes[0].profile == "gpt"
    assert [p.name for p in plan.pools] == ["gpt"]
    backup = materialize(config, "anthropic.backup")
    assert specs(backup)[:3] == [
        ("anthropic.backup", "claude-haiku-4-5", None),
        ("azure.east", "gpt-4.1", "gpt"),
        ("azure.west", "gpt-4.1", "gpt"),
    ]


# --- materialisation ----------------------------------------------------------------------------------------


def test_a_pool_materialises_its_members_in_tiers_then_its_fallbacks() -> None:
    """Every member's primary model first, then every member's first fallback model, ...; then the fallbacks."""
    config = load('default_provider = "gpt"\n' + PROFILES + POOL)
    assert specs(build_plan(config).default.entries) == [
        ("azure.east", "gpt-4.1", "gpt"),
        ("azure.west", "gpt-4.1", "gpt"),
        ("openai.main", "gpt-4.1", "gpt"),
        ("azure.east", "gpt-4.1-mini", "gpt"),
        ("azure.west", "gpt-4.1-mini", "gpt"),
        ("azure.west", "gpt-4.1-nano", "gpt"),
        ("anthropic.backup", "claude-haiku-4-5", None),
    ]


def test_an_override_becomes_every_members_primary_model() -> None:
    """default_model (or a caller's model) replaces each member's model; their fallback models follow."""
    config = load('default_provider = "gpt"\ndefault_model = "gpt-4.1-mini"\n' + PROFILES + POOL)
    plan = build_plan(config)
    assert plan.default.model == "gpt-4.1-mini"
    assert specs(plan.default.entries)[:4] == [
        ("azure.east", "gpt-4.1-mini", "gpt"),
        ("azure.west", "gpt-4.1-mini", "gpt"),
        ("openai.main", "gpt-4.1-mini", "gpt"),
        ("azure.west", "gpt-4.1-nano", "gpt"),
    ]


def test_an_unpinned_member_forwards_the_route_model() -> None:
    """An unpinned member receives the route's model; the default target sends the first member's model."""
    pool = '[pools.mix]\nmembers = ["openai.main", "openai.open"]\nstrategy = "least_busy"\n'
    route = '[[model_routes]]\nhint = "mix"\nmodel_provider = "mix"\nmodel = "gpt-4.1"\n'
    config = load('default_provider = "mix"\n' + PROFILES + pool + route)
    plan = build_plan(config)
    assert specs(plan.routes[0].entries) == [("openai.main", "gpt-4.1", "mix"), ("openai.open", None, "mix")]
    assert plan.default.model == "gpt-4.1"


def test_a_member_reached_earlier_is_materialised_once() -> None:
    """A pool member that the walk already reached keeps its earlier place (diamonds are materialised once)."""
    text = PROFILES.replace('model = "claude-haiku-4-5"', 'model = "claude-haiku-4-5"\nfallback = ["east", "gpt"]')
    config = load(DEFAULT + text + POOL.replace('fallback = ["anthropic.backup"]', ""))
    assert [(p, m) for p, m, _ in specs(materialize(config, "anthropic.backup"))][:4] == [
        ("anthropic.backup", "claude-haiku-4-5"),
        ("azure.east", "gpt-4.1"),
        ("azure.east", "gpt-4.1-mini"),
        ("azure.west", "gpt-4.1"),
    ]
    assert specs(materialize(config, "anthropic.backup"))[1][2] is None  # reached as a plain fallback first


def test_a_members_own_fallback_is_not_followed_and_is_reported() -> None:
    """Inside a pool, a member's own fallback list is ignored (the pool's applies), with a warning on the member."""
    text = PROFILES.replace('api_key = "sk-main"', 'api_key = "sk-main"\nfallback = ["openai.open"]')
    config = load('default_provider = "gpt"\n' + text + POOL)
    assert "openai.open" not in [e.profile for e in build_plan(config).default.entries]
    codes = {(w.code, w.path) for w in collect_warnings(config)}
    assert ("pool_member_fallback_ignored", "pools.gpt.members[2]") in codes


def test_a_member_without_a_credential_is_fatal_with_its_path() -> None:
    """A reachable member that needs a key and has none fails the plan, naming the member's key path."""
    text = PROFILES.replace('api_key = "sk-open"\n', "") + '[pools.p]\nmembers = ["openai.main", "openai.open"]\n'
    config = load('default_provider = "p"\n' + text)
    with pytest.raises(ConfigError) as info:
        build_plan(config)
    assert (info.value.path, info.value.code) == ("pools.p.members[1]", "missing_credential")


def test_pool_fallback_links_are_reported_and_pruned_like_a_profiles() -> None:
    """A pool's dangling, cyclic or member-naming fallbacks are warnings; the plan keeps the rest."""
    text = PROFILES.replace('model = "claude-haiku-4-5"', 'model = "claude-haiku-4-5"\nfallback = ["gpt"]')
    pool = '[pools.gpt]\nmembers = ["azure.east"]\nfallback = ["ghost", "anthropic.backup", "gpt", "east"]\n'
    config = load('default_provider = "gpt"\n' + text + pool)
    codes = {(w.code, w.path) for w in collect_warnings(config)}
    assert ("dangling_fallback_ref", "pools.gpt.fallback[0]") in codes
    assert ("fallback_cycle", "pools.gpt.fallback[1]") in codes  # anthropic.backup -> gpt -> anthropic.backup
    assert ("fallback_cycle", "pools.gpt.fallback[2]") in codes  # a pool falling back to itself
    assert ("pool_fallback_is_member", "pools.gpt.fallback[3]") in codes
    assert [e.profile for e in build_plan(config).default.entries] == ["azure.east", "azure.east", "anthropic.backup"]


def test_settings_another_strategy_ignores_are_reported() -> None:
    """Weights without strategy weighted, or explore without latency, load with a pool_setting_unused warning."""
    pool = (
        '[pools.p]\nmembers = ["azure.east", "west"]\nstrategy = "least_busy"\nweights = { east = 2 }\nexplore = 0.1\n'
    )
    config = load(DEFAULT + PROFILES + pool)
    codes = {(w.code, w.path) for w in collect_warnings(config)}
    assert ("pool_setting_unused", "pools.p.weights") in codes
    assert ("pool_setting_unused", "pools.p.explore") in codes
    quiet = load(DEFAULT + PROFILES + '[pools.p]\nmembers = ["azure.east", "west"]\nweights = { east = 2 }\n')
    assert not [w for w in collect_warnings(quiet) if w.code.startswith("pool_")]


def test_shared_keys_with_a_pool_default_are_reported() -> None:
    """[reliability] api_keys extend the default profile's keys; with a pool default they apply to nothing."""
    config = load('default_provider = "gpt"\n' + PROFILES + POOL + '[reliability]\napi_keys = ["sk-extra"]\n')
    codes = {(w.code, w.path) for w in collect_warnings(config)}
    assert ("reliability_keys_unused", "reliability.api_keys") in codes


def test_pool_specs_resolve_members_and_weights() -> None:
    """A pool's spec names members by family.alias with one weight each (1 when not configured)."""
    pool = '[pools.p]\nmembers = ["east", "azure.west"]\nweights = { east = 3 }\n'
    (spec,) = build_plan(load('default_provider = "openai.main"\n' + PROFILES + pool)).pools
    assert (spec.members, spec.weights, spec.strategy, spec.explore) == (
        ("azure.east", "azure.west"),
        (3.0, 1.0),
        "weighted",
        0.05,
    )
