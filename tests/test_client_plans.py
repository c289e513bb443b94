"""A client resolves each set of call options once: the kept target and plan are what resolving them gives."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import Fleet
from turnout import Client
from turnout.call import Operation
from turnout.client import _KEPT_PLANS, requested_route
from turnout.core.errors import ConfigError
from turnout.walk.pools import leading_members

CONFIG = """
default_provider = "openai.fast"
[providers.models.openai.fast]
api_key = "sk-fast"
model = "fast-model"
fallback = ["anthropic.smart"]
[providers.models.openai.open]
api_key = "sk-open"
[providers.models.anthropic.smart]
api_key = "sk-smart"
model = "smart-model"
[[model_routes]]
hint = "reasoning"
model_provider = "anthropic.smart"
model = "claude-opus"
[senders.vip]
provider = "anthropic.smart"
[notices]
intra_family = true
"""

_options = st.tuples(
    st.sampled_from([None, "hint:reasoning", "hint:nothing", "other-model", "fast-model"]),
    st.sampled_from([None, "openai.fast", "openai.open", "anthropic.smart"]),
    st.sampled_from([None, "vip", "nobody"]),
    st.sampled_from([("chat", False), ("stream", True), ("turn", True)]),
)


def _client() -> Client:
    return Client.from_toml(CONFIG, adapter_builder=Fleet(), ledger=False, surface="cli")


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(_options, min_size=1, max_size=8))
def test_a_calls_target_and_plan_are_what_its_options_resolve_to(
    calls: list[tuple[str | None, str | None, str | None, tuple[str, bool]]],
) -> None:
    """Whatever options calls come with, in any order and repeated: the target and plan resolving them afresh give."""
    client = _client()
    for model, provider, sender, (operation, stream) in calls:
        kind: Operation | None = "turn" if operation == "turn" else None
        try:
            target = client.route(model=model, provider=provider, sender=sender)
        except ConfigError as exc:  # a profile without a model, and none given: every call is refused alike
            with pytest.raises(ConfigError, match=re.escape(str(exc))):
                client._call(model, provider, sender, stream=stream, operation=kind)
            continue
        kept, call = client._call(model, provider, sender, stream=stream, operation=kind)
        assert kept == target
        plan = call.plan
        assert plan.requested == requested_route(target) and plan.peers == leading_members(target.reliable.entries)
        assert (plan.stream, plan.operation, plan.surface, plan.intra_family) == (stream, operation, "cli", True)
        assert plan.ledger is client.ledger and plan.tracer is client.tracing
        assert call.attempts == [] and call.requested is plan.requested


def test_calls_with_the_same_options_share_their_plan_and_other_kinds_do_not() -> None:
    """The second call with the same options reuses the first one's plan; a stream to the same route has its own."""
    client = _client()
    first = client._call(None, "anthropic.smart", None, stream=False)[1]
    second = client._call(None, "anthropic.smart", None, stream=False)[1]
    streamed = client._call(None, "anthropic.smart", None, stream=True)[1]
    assert first.plan is second.plan and first is not second and first.call_id != second.call_id
    assert streamed.plan is not first.plan and streamed.stream and not first.stream


def test_an_unknown_hint_is_warned_about_on_every_call(caplog: pytest.LogCaptureFixture) -> None:
    """A call with a hint no route has is warned about each time, as when nothing was kept."""
    client = _client()
    with caplog.at_level(logging.WARNING, logger="turnout.router"):
        for _ in range(3):
            client._call("hint:nothing", None, None, stream=False)
    assert sum("unknown route hint" in r.getMessage() for r in caplog.records) == 3


def test_a_failed_resolution_is_not_kept() -> None:
    """An unknown profile is refused on every call, not only the first."""
    client = _client()
    for _ in range(2):
        with pytest.raises(ConfigError):
            client._call(None, "openai.nowhere", None, stream=False)
    assert not client._plans


def test_the_kept_plans_are_bounded() -> None:
    """However many different models callers name, the client keeps at most a bounded number of plans."""
    client = _client()
    for i in range(_KEPT_PLANS + 40):
        client._call(f"model-{i}", "openai.open", None, stream=False)
    assert len(client._plans) == _KEPT_PLANS
    target, call = client._call("model-0", "openai.open", None, stream=False)  # dropped, resolved again
    assert target.model == "model-0" and call.requested.model == "model-0"
