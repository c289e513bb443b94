"""Hint routing: target selection, pinning, dedup, credentials, unknown hints."""

from __future__ import annotations

import logging

import pytest

from fakes import FakeClock, Fleet, req
from turnout.config import load_config_toml
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, StreamEvent, TextDelta, ToolSpec
from turnout.factory import Factory
from turnout.walk.router import Router

CONFIG = """
default_provider = "openai.fast"
[providers.models.openai.fast]
api_key = "sk-fast"
model = "llama-3-70b"
[providers.models.anthropic.smart]
api_key = "sk-smart"
[providers.models.openai.tool]
api_key = "sk-tool"
model = "tool-pin"
[[model_routes]]
hint = "reasoning"
model_provider = "anthropic.smart"
model = "claude-opus"
[[model_routes]]
hint = "deep"
model_provider = "anthropic.smart"
model = "claude-deep"
[[model_routes]]
hint = "self"
model_provider = "openai.fast"
model = "ignored-route-model"
[[model_routes]]
hint = "tools"
model_provider = "openai.tool"
model = "ignored-too"
"""


def factory(text: str = CONFIG, fleet: Fleet | None = None) -> tuple[Factory, Fleet]:
    fleet = fleet or Fleet()
    clock = FakeClock()
    return Factory(load_config_toml(text, env={}), adapter_builder=fleet, env=clock.env), fleet


async def chat(router: Router, request: ChatRequest, model: str) -> ChatResponse:
    """What the client does with a model: resolve its target, then walk that target's route."""
    target = router.resolve(model)
    return (await target.reliable.run(request, target.model)).response


async def stream(router: Router, request: ChatRequest, model: str) -> list[StreamEvent]:
    """The events of the stream the resolved target opens."""
    target = router.resolve(model)
    opened = await target.reliable.open_stream(request, target.model)
    return [event async for batch in opened.batches() for event in batch]


def capabilities(router: Router, model: str | None) -> list[Capabilities]:
    """The capabilities of every entry of the target ``model`` resolves to, for the model sent to it."""
    target = router.resolve(model)
    return [entry.capabilities(target.model) for entry in target.reliable.entries]


async def test_routes_hint_to_correct_provider_and_model() -> None:
    """hint:reasoning goes to the smart profile with the route's model; the default is untouched."""
    f, fleet = factory()
    await chat(f.router(), req(), "hint:reasoning")
    assert fleet.calls("anthropic.smart") == ["claude-opus"]
    assert fleet.calls("openai.fast") == []


async def test_non_hint_model_uses_default_target() -> None:
    """A plain model stays on the default target (whose pin wins)."""
    f, fleet = factory()
    router = f.router()
    target = router.resolve("gpt-4o")
    assert target.reliable is router.default and target.model == "gpt-4o" and target.hint is None
    await chat(router, req(), "gpt-4o")
    assert fleet.calls("openai.fast") == ["llama-3-70b"]


def test_resolve_strips_hint_prefix() -> None:
    """resolve('hint:reasoning') gives the route walk and the route model."""
    f, _ = factory()
    target = f.router().resolve("hint:reasoning")
    assert (target.model, target.hint) == ("claude-opus", "reasoning")


def test_routes_sharing_a_target_share_one_walk() -> None:
    """Route targets are deduplicated by model_provider."""
    f, _ = factory()
    router = f.router()
    assert router.resolve("hint:reasoning").reliable is router.resolve("hint:deep").reliable
    assert len(router.targets()) == 3


async def test_hint_back_to_primary_keeps_the_primary_pin() -> None:
    """A hint pointing at the active profile does not override its pin."""
    f, fleet = factory()
    router = f.router()
    assert router.resolve("hint:self").reliable is router.default
    await chat(router, req(), "hint:self")
    assert fleet.calls("openai.fast") == ["llama-3-70b"]


async def test_non_primary_target_with_a_model_keeps_its_pin() -> None:
    """A target profile with a model serves its pin, not the route model."""
    f, fleet = factory()
    await chat(f.router(), req(), "hint:tools")
    assert fleet.calls("openai.tool") == ["tool-pin"]


async def test_unknown_hint_warns_and_stays_on_default(caplog: pytest.LogCaptureFixture) -> None:
    """An unknown hint logs a warning; a pinned default serves its pin."""
    f, fleet = factory()
    with caplog.at_level(logging.WARNING, logger="turnout.router"):
        await chat(f.router(), req(), "hint:nonexistent")
    assert "nonexistent" in caplog.text
    assert fleet.calls("openai.fast") == ["llama-3-70b"]


async def test_unknown_hint_reaches_an_unpinned_default_literally() -> None:
    """An unpinned default forwards the literal hint:<name>."""
    text = CONFIG.replace('model = "llama-3-70b"\n', "", 1)
    f, fleet = factory(text)
    await chat(f.router(), req(), "hint:nonexistent")
    assert fleet.calls("openai.fast") == ["hint:nonexistent"]


async def test_routed_target_uses_its_own_endpoint_and_key() -> None:
    """A route target is built from its own profile (endpoint, credentials), not the primary's."""
    f, fleet = factory()
    await chat(f.router(), req(), "hint:reasoning")
    assert ("anthropic.smart", "sk-smart") in fleet.built
    assert all(key != "sk-fast" for (name, key) in fleet.built if name == "anthropic.smart")


async def test_route_credential_precedence_uses_route_key_first() -> None:
    """The first route naming a target supplies its key."""
    text = CONFIG.replace('model = "claude-opus"\n', 'model = "claude-opus"\napi_key = "sk-route"\n')
    f, fleet = factory(text)
    await chat(f.router(), req(), "hint:deep")
    assert [k for (n, k) in fleet.built if n == "anthropic.smart"] == ["sk-route"]


def test_capabilities_follow_the_resolved_target() -> None:
    """Capabilities of a hint come from the route; plain models from the default."""

    class VisionFleet(Fleet):
        def __call__(self, name, profile, key):  # type: ignore[no-untyped-def]
            p = super().__call__(name, profile, key)
            if name == "anthropic.smart":
                p.caps = Capabilities(vision=True, streaming=True)
            else:
                p.caps = Capabilities(vision=False)
            return p

    f, _ = factory(fleet=VisionFleet())
    router = f.router()
    assert all(c.vision for c in capabilities(router, "hint:reasoning"))
    assert not all(c.vision for c in capabilities(router, "gpt-4o"))
    assert not any(c.streaming for c in capabilities(router, None))


async def test_stream_routes_hint_to_target_and_model() -> None:
    """A stream with a hint opens the route target's stream with the route model."""
    f, fleet = factory(fleet=Fleet(anthropic__smart=["streamed system response"]))
    events = await stream(f.router(), req(), "hint:reasoning")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["streamed system response"]
    assert fleet.built[("anthropic.smart", "sk-smart")].stream_calls == ["claude-opus"]


async def test_chat_with_tools_routes_hint() -> None:
    """Tool calls route like plain chats."""
    f, fleet = factory()
    await chat(f.router(), ChatRequest.of("x", tools=[ToolSpec(name="shell")]), "hint:reasoning")
    assert fleet.calls("anthropic.smart") == ["claude-opus"]
