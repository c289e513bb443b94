"""The fallback graph: warning codes and paths, pruning, materialised order, fatal credentials."""

from __future__ import annotations

import pytest

from turnout.config import (
    MAX_FALLBACK_DEPTH,
    Config,
    build_plan,
    collect_warnings,
    load_config_toml,
    materialize,
)
from turnout.config.graph import EntrySpec
from turnout.core.errors import ConfigError


def load(text: str, env: dict[str, str] | None = None) -> Config:
    return load_config_toml(text, env=env or {})


def codes(cfg: Config) -> list[tuple[str, str]]:
    return [(w.code, w.path) for w in collect_warnings(cfg) if w.code != "unsupported_key"]


def order(entries: tuple[EntrySpec, ...]) -> list[str]:
    return [f"{e.profile}/{e.model or '*'}" for e in entries]


PRIMARY = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
"""


def test_fallback_warns_on_dangling_ref() -> None:
    """A fallback naming no profile is reported at its exact path and skipped."""
    cfg = load(PRIMARY + 'fallback = ["openai.ghost"]\n')
    assert codes(cfg) == [("dangling_fallback_ref", "providers.models.openai.primary.fallback[0]")]
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1"]


def test_fallback_no_warning_when_ref_resolves() -> None:
    """A resolving fallback, written dotted or as a unique bare alias, is not reported."""
    cfg = load(PRIMARY + 'fallback = ["backup"]\n[providers.models.anthropic.backup]\napi_key="k"\nmodel="c"\n')
    assert codes(cfg) == []
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1", "anthropic.backup/c"]


def test_ambiguous_bare_alias_is_dangling() -> None:
    """A bare alias present in two families does not resolve."""
    cfg = load(
        PRIMARY + 'fallback = ["b"]\n[providers.models.anthropic.b]\napi_key="k"\n'
        '[providers.models.gemini.b]\napi_key="k"\n'
    )
    assert codes(cfg) == [("dangling_fallback_ref", "providers.models.openai.primary.fallback[0]")]


def test_fallback_warns_on_two_node_cycle() -> None:
    """A two-node cycle is reported once, at the edge that closes it, and pruned."""
    cfg = load(
        PRIMARY + 'fallback = ["openai.b"]\n[providers.models.openai.b]\napi_key="k"\nmodel="m"\n'
        'fallback = ["openai.primary"]\n'
    )
    assert codes(cfg) == [("fallback_cycle", "providers.models.openai.b.fallback[0]")]
    msg = collect_warnings(cfg)[0].message
    assert "openai.primary -> openai.b -> openai.primary" in msg
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1", "openai.b/m"]
    assert order(materialize(cfg, "openai.b")) == ["openai.b/m", "openai.primary/gpt-4.1"]


def test_fallback_self_reference_is_a_cycle() -> None:
    """A profile naming itself is a cycle."""
    cfg = load(PRIMARY + 'fallback = ["openai.primary"]\n')
    assert codes(cfg) == [("fallback_cycle", "providers.models.openai.primary.fallback[0]")]
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1"]


def test_fallback_empty_ref_is_skipped() -> None:
    """A blank fallback reference is skipped silently."""
    cfg = load(PRIMARY + 'fallback = ["  "]\n')
    assert codes(cfg) == []
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1"]


def chain(n: int) -> str:
    text = 'default_provider = "openai.p0"\n'
    for i in range(n):
        nxt = f'fallback = ["openai.p{i + 1}"]\n' if i + 1 < n else ""
        text += f'[providers.models.openai.p{i}]\napi_key = "k{i}"\nmodel = "m{i}"\n{nxt}'
    return text


def test_fallback_warns_when_chain_exceeds_max_depth() -> None:
    """Links deeper than three fallbacks are reported at the pruned list and not materialised."""
    cfg = load(chain(5))
    assert ("max_fallback_depth_exceeded", "providers.models.openai.p3.fallback") in codes(cfg)
    assert order(materialize(cfg, "openai.p0")) == [
        "openai.p0/m0",
        "openai.p1/m1",
        "openai.p2/m2",
        "openai.p3/m3",
    ]


def test_deep_acyclic_fallback_does_not_overflow() -> None:
    """A chain of MAX+50 profiles builds, pruned to the maximum depth."""
    cfg = load(chain(MAX_FALLBACK_DEPTH + 50))
    assert len(materialize(cfg, "openai.p0")) == MAX_FALLBACK_DEPTH + 1


def test_fallback_models_warns_on_empty_entry() -> None:
    """A blank fallback model is reported and skipped."""
    cfg = load(PRIMARY + 'fallback_models = ["", "gpt-4.1-mini"]\n')
    assert codes(cfg) == [("empty_fallback_model", "providers.models.openai.primary.fallback_models[0]")]
    assert order(materialize(cfg, "openai.primary")) == [
        "openai.primary/gpt-4.1",
        "openai.primary/gpt-4.1-mini",
    ]


def test_fallback_models_warns_on_duplicate_of_primary() -> None:
    """A fallback model equal to the primary is reported and skipped."""
    cfg = load(PRIMARY + 'fallback_models = ["gpt-4.1"]\n')
    assert codes(cfg) == [("fallback_model_duplicates_primary", "providers.models.openai.primary.fallback_models[0]")]
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1"]


def test_fallback_models_distinct_entries_do_not_warn() -> None:
    """Distinct fallback models are materialised in order, pinned."""
    cfg = load(PRIMARY + 'fallback_models = ["a", "b"]\n')
    assert codes(cfg) == []
    entries = materialize(cfg, "openai.primary")
    assert order(entries) == ["openai.primary/gpt-4.1", "openai.primary/a", "openai.primary/b"]
    assert all(e.pinned for e in entries)


def test_all_five_codes_at_once() -> None:
    """A config with every kind of problem reports all five codes and still materialises."""
    cfg = load(
        chain(5).replace(
            'fallback = ["openai.p1"]',
            'fallback = ["openai.p1", "ghost.x", "openai.p0"]\nfallback_models = ["", "m0"]',
        )
    )
    got = {c for c, _ in codes(cfg)}
    assert got == {
        "dangling_fallback_ref",
        "fallback_cycle",
        "max_fallback_depth_exceeded",
        "empty_fallback_model",
        "fallback_model_duplicates_primary",
    }
    assert len(materialize(cfg, "openai.p0")) == 4


def test_unpinned_profile_does_not_materialise_fallback_models() -> None:
    """Without a primary model: one unpinned entry; fallback_models unused; fallback profiles still walked."""
    cfg = load(
        'default_provider="openai.u"\n[providers.models.openai.u]\napi_key="k"\nfallback_models=["x"]\n'
        'fallback=["anthropic.b"]\n[providers.models.anthropic.b]\napi_key="k"\nmodel="c"\n'
    )
    entries = materialize(cfg, "openai.u")
    assert order(entries) == ["openai.u/*", "anthropic.b/c"]
    assert not entries[0].pinned


def test_override_pins_an_unpinned_profile() -> None:
    """An explicit override becomes the primary pin and enables fallback_models."""
    cfg = load('default_provider="openai.u"\n[providers.models.openai.u]\napi_key="k"\nfallback_models=["x"]\n')
    assert order(materialize(cfg, "openai.u", model_override="o")) == ["openai.u/o", "openai.u/x"]


def test_resilient_alias_builds_with_fallback_chain() -> None:
    """The seed's example materialises in the documented order."""
    cfg = load("""
default_provider = "anthropic.prod"
[providers.models.anthropic.prod]
api_key = "k"
model = "claude-sonnet-4-5"
fallback_models = ["claude-haiku-4-5"]
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "k"
model = "gpt-4.1"
""")
    assert order(materialize(cfg, "anthropic.prod")) == [
        "anthropic.prod/claude-sonnet-4-5",
        "anthropic.prod/claude-haiku-4-5",
        "openai.backup/gpt-4.1",
    ]


def test_diamond_is_materialised_once() -> None:
    """A profile reached through two paths appears once (ZeroClaw materialises it twice)."""
    cfg = load(
        PRIMARY + 'fallback = ["openai.a", "openai.b"]\n'
        '[providers.models.openai.a]\napi_key="k"\nmodel="a"\nfallback=["openai.shared"]\n'
        '[providers.models.openai.b]\napi_key="k"\nmodel="b"\nfallback=["openai.shared"]\n'
        '[providers.models.openai.shared]\napi_key="k"\nmodel="s"\n'
    )
    assert order(materialize(cfg, "openai.primary")) == [
        "openai.primary/gpt-4.1",
        "openai.a/a",
        "openai.shared/s",
        "openai.b/b",
    ]


def test_resilient_alias_fails_when_resolved_fallback_lacks_profile_credential() -> None:
    """A fallback that resolves but has no key is fatal, naming the reference and the resolved profile."""
    cfg = load(PRIMARY + 'fallback = ["bad"]\n[providers.models.anthropic.bad]\nmodel = "c"\n')
    with pytest.raises(ConfigError) as info:
        materialize(cfg, "openai.primary")
    msg = str(info.value)
    assert "'bad'" in msg and "anthropic.bad" in msg and "openai.primary.fallback[0]" in msg
    assert info.value.code == "missing_credential"


def test_fallback_uri_lacks_profile_credential() -> None:
    """A custom endpoint does not excuse a missing key."""
    cfg = load(PRIMARY + 'fallback = ["openai.bad"]\n[providers.models.openai.bad]\nuri="https://example.test/v1"\n')
    with pytest.raises(ConfigError, match=r"openai\.bad"):
        materialize(cfg, "openai.primary")


def test_unset_env_credential_is_named() -> None:
    """A key that refers to an unset variable says which variable."""
    cfg = load(PRIMARY + 'fallback = ["openai.bad"]\n[providers.models.openai.bad]\napi_key="${NOPE_KEY}"\n')
    with pytest.raises(ConfigError, match=r"\$NOPE_KEY is not set"):
        materialize(cfg, "openai.primary")


def test_local_fallback_without_profile_api_key() -> None:
    """A local family (ollama) needs no key."""
    cfg = load(PRIMARY + 'fallback = ["ollama.local"]\n[providers.models.ollama.local]\nmodel = "llama3"\n')
    assert order(materialize(cfg, "openai.primary")) == ["openai.primary/gpt-4.1", "ollama.local/llama3"]


def test_dangling_and_cyclic_fallbacks_do_not_abort_build() -> None:
    """Dangling and cyclic references never abort construction."""
    cfg = load(PRIMARY + 'fallback = ["nowhere", "openai.primary"]\n')
    assert len(build_plan(cfg).default.entries) == 1


def test_primary_without_credential_is_fatal() -> None:
    """The active profile itself must have a key."""
    cfg = load('default_provider="openai.p"\n[providers.models.openai.p]\nmodel="m"\n')
    with pytest.raises(ConfigError, match="no credential"):
        build_plan(cfg)


ROUTED = (
    PRIMARY
    + """
[providers.models.openai.routed]
api_key = "sk-routed"
fallback = ["openai.bad"]
[providers.models.openai.bad]
model = "m"
[[model_routes]]
hint = "r"
model_provider = "openai.routed"
model = "x"
"""
)


def test_routed_provider_fallback_lacking_credential_fails() -> None:
    """A route target whose fallback lacks a key is fatal, naming both profiles."""
    with pytest.raises(ConfigError) as info:
        build_plan(load(ROUTED))
    assert "openai.routed" in str(info.value) and "openai.bad" in str(info.value)


def test_route_credential_precedence_uses_route_key_first() -> None:
    """The first route naming a target supplies its key, even when the profile has none."""
    cfg = load(
        PRIMARY
        + """
[providers.models.anthropic.t]
model = "c"
[[model_routes]]
hint = "a"
model_provider = "anthropic.t"
model = "c"
api_key = "sk-route-a"
[[model_routes]]
hint = "b"
model_provider = "anthropic.t"
model = "c"
api_key = "sk-route-b"
"""
    )
    plan = build_plan(cfg)
    assert [r.credential.reveal() if r.credential else None for r in plan.routes] == [
        "sk-route-a",
        "sk-route-a",
    ]
    assert [w.code for w in collect_warnings(cfg)] == ["route_credential_conflict"]


def test_route_credential_falls_back_to_profile_key() -> None:
    """Without a route key the profile's key is used."""
    cfg = load(
        PRIMARY + '[providers.models.anthropic.t]\napi_key="sk-prof"\n'
        '[[model_routes]]\nhint="a"\nmodel_provider="anthropic.t"\nmodel="c"\n'
    )
    route = build_plan(cfg).routes[0]
    assert route.credential is None
    assert order(route.entries) == ["anthropic.t/*"]


def test_route_pinning_rules() -> None:
    """Primary target keeps the default pin; a target with a model keeps its pin; one without stays unpinned."""
    cfg = load("""
default_provider = "openai.primary"
default_model = "gpt-4.1-mini"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
[providers.models.anthropic.pinned]
api_key = "k"
model = "claude-pinned"
fallback_models = ["claude-2"]
[providers.models.openai.free]
api_key = "k"
fallback_models = ["unused"]
[[model_routes]]
hint = "self"
model_provider = "openai.primary"
model = "route-model-ignored"
[[model_routes]]
hint = "pinned"
model_provider = "anthropic.pinned"
model = "route-model-ignored-too"
[[model_routes]]
hint = "free"
model_provider = "openai.free"
model = "route-model-flows"
""")
    plan = build_plan(cfg)
    assert order(plan.default.entries) == ["openai.primary/gpt-4.1-mini"]
    by_hint = {r.hint: order(r.entries) for r in plan.routes}
    assert by_hint == {
        "self": ["openai.primary/gpt-4.1-mini"],
        "pinned": ["anthropic.pinned/claude-pinned", "anthropic.pinned/claude-2"],
        "free": ["openai.free/*"],
    }


def test_reliability_key_pool_extends_default_profile() -> None:
    """[reliability] api_keys extend the default profile's keys in order, without duplicates."""
    from turnout.config import profile_credentials

    cfg = load(PRIMARY + '[reliability]\napi_keys = ["sk-p", "sk-2", "sk-3"]\n')
    assert [k.reveal() for k in profile_credentials(cfg, "openai.primary")] == ["sk-p", "sk-2", "sk-3"]
