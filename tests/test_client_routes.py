"""A client resolves each route once: the kept resolution is the one :meth:`Client.route` gives every time."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import Fleet
from turnout import Client
from turnout.client import _ROUTES_KEPT, requested_route
from turnout.errors import ConfigError
from turnout.pools import leading_members

CONFIG = """
default_provider = "openai.fast"
[providers.models.openai.fast]
api_key = "sk-fast"
model = "gpt-4.1-mini"
fallback = ["anthropic.smart"]
[providers.models.openai.open]
api_key = "sk-open"
[providers.models.anthropic.smart]
api_key = "sk-smart"
model = "claude-opus"
[pools.duo]
members = ["openai.fast", "anthropic.smart"]
[[model_routes]]
hint = "reasoning"
model_provider = "anthropic.smart"
model = "claude-opus"
[[model_routes]]
hint = "shared"
model_provider = "duo"
model = "m"
[senders.vip]
provider = "anthropic.smart"
[senders.cheap]
model = "gpt-4.1-nano"
"""

MODELS = st.sampled_from([None, "hint:reasoning", "hint:shared", "gpt-4.1", "gpt-4.1-nano", "x"])
PROVIDERS = st.sampled_from([None, "openai.fast", "openai.open", "anthropic.smart", "duo", "fast"])
SENDERS = st.sampled_from([None, "vip", "cheap", "nobody"])


def make_client() -> Client:
    return Client.from_toml(CONFIG, adapter_builder=Fleet(), ledger=False)


def resolved(c: Client, model: str | None, provider: str | None, sender: str | None) -> tuple[Any, ...]:
    """What ``_call`` uses, as comparable values: the walk (by identity), the model, the hint, the route, the peers."""
    target, call = c._call(model, provider, sender, stream=False)
    return (id(target.walk), target.model, target.hint, call.requested, leading_members(target.walk.entries))


def fresh(c: Client, model: str | None, provider: str | None, sender: str | None) -> tuple[Any, ...]:
    target = c.route(model=model, provider=provider, sender=sender)
    return (id(target.walk), target.model, target.hint, requested_route(target), leading_members(target.walk.entries))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(MODELS, PROVIDERS, SENDERS), min_size=1, max_size=12))
def test_a_kept_route_is_what_resolving_it_again_gives(calls: list[tuple[str | None, str | None, str | None]]) -> None:
    """Any sequence of calls, repeated or not, gets the target, route and peers a fresh resolution gives."""
    c = make_client()
    for model, provider, sender in calls:
        try:
            expected = fresh(c, model, provider, sender)
        except ConfigError:
            with pytest.raises(ConfigError):
                c._call(model, provider, sender, stream=False)
            continue
        assert resolved(c, model, provider, sender) == expected
        assert resolved(c, model, provider, sender) == expected


def test_an_unknown_hint_warns_on_every_call(caplog: pytest.LogCaptureFixture) -> None:
    """An unknown hint is resolved (and warned about) each time it is used, never kept."""
    c = make_client()
    with caplog.at_level(logging.WARNING, logger="turnout.router"):
        c._call("hint:nonexistent", None, None, stream=False)
        c._call("hint:nonexistent", None, None, stream=False)
    assert sum("nonexistent" in r.getMessage() for r in caplog.records) == 2


def test_a_failed_resolution_is_not_kept() -> None:
    """An unknown profile raises on every call."""
    c = make_client()
    for _ in range(2):
        with pytest.raises(ConfigError):
            c._call(None, "openai.nowhere", None, stream=False)


def test_the_kept_routes_are_bounded() -> None:
    """Many distinct models keep at most ``_ROUTES_KEPT`` routes, and a route dropped resolves again alike."""
    c = make_client()
    first = fresh(c, "model-0", None, None)
    for i in range(_ROUTES_KEPT + 10):
        c._call(f"model-{i}", None, None, stream=False)
    assert len(c._routes) == _ROUTES_KEPT
    assert ("model-0", None, None) not in c._routes
    assert resolved(c, "model-0", None, None) == first
