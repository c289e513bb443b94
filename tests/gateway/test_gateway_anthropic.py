"""The official anthropic SDK against the gateway, served by simulator upstreams of every protocol."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from gateway_support import (
    ANTHROPIC_TOOL,
    GATEWAY_KEY,
    MESSAGES,
    PROTOCOLS,
    SIM_TEXT,
    config,
    decode_header,
    gateway,
    post,
    profile,
)

from turnout.gateway import GatewayServer
from turnout.sim import Simulator


def sdk(server: GatewayServer, key: str = GATEWAY_KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=key, max_retries=0)


async def read_text(client: anthropic.AsyncAnthropic, into: list[str]) -> None:
    """Stream one answer's text into ``into`` (so a test still sees it when the stream raises)."""
    async with client.messages.stream(model="", max_tokens=100, messages=MESSAGES) as stream:
        async for text in stream.text_stream:
            into.append(text)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_every_upstream_protocol_serves_the_anthropic_surface(sim: Simulator, protocol: str) -> None:
    """An Anthropic client gets the answer whatever protocol the upstream speaks, streamed and not."""
    family = PROTOCOLS[protocol][0]
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "sim-ok", protocol=protocol))
    async with gateway(toml) as server, sdk(server) as client:
        message = await client.messages.create(model="", max_tokens=100, messages=MESSAGES)
        async with client.messages.stream(model="", max_tokens=100, messages=MESSAGES) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == SIM_TEXT  # type: ignore[union-attr]
    assert message.model == "sim-ok"
    assert message.stop_reason == "end_turn"
    assert text == SIM_TEXT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5


async def test_attribution_headers_and_fallback_notice(sim: Simulator) -> None:
    """An Anthropic client served by an OpenAI fallback sees the served model and the notice header."""
    toml = config(
        "anthropic.main",
        profile(sim, "anthropic.main", "sim-529", protocol="anthropic", extra='fallback = ["openai.backup"]\n'),
        profile(sim, "openai.backup", "sim-ok"),
    )
    async with gateway(toml) as server, sdk(server) as client:
        raw = await client.messages.with_raw_response.create(model="", max_tokens=100, messages=MESSAGES)
    assert (await raw.parse()).model == "sim-ok"
    assert raw.headers["x-turnout-provider"] == "openai.backup"
    assert raw.headers["x-turnout-model"] == "sim-ok"
    assert raw.headers["x-turnout-attempts"] == "3"
    assert decode_header(raw.headers["x-turnout-fallback"]).startswith("⚡ sim-529 (anthropic.main) was unavailable")


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "ollama"])
async def test_tool_use_blocks_whole_and_streamed(sim: Simulator, protocol: str) -> None:
    """Tool calls come back as tool_use blocks with parsed input, and tool results are accepted back."""
    family = PROTOCOLS[protocol][0]
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "sim-ok-tc1", protocol=protocol))
    async with gateway(toml) as server, sdk(server) as client:
        message = await client.messages.create(
            model="",
            max_tokens=100,
            messages=MESSAGES,
            tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
        )
        async with client.messages.stream(
            model="",
            max_tokens=100,
            messages=MESSAGES,
            tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
        ) as stream:
            final = await stream.get_final_message()
        tool = message.content[-1]
        follow_up = await client.messages.create(
            model="",
            max_tokens=100,
            tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
            messages=[
                *MESSAGES,
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "Sunny, 21 C"}],  # type: ignore[union-attr]
                },
            ],
        )
    for answer in (message, final):
        assert answer.stop_reason == "tool_use"
        assert [b.type for b in answer.content] == ["text", "tool_use"]
        assert answer.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert follow_up.content[0].text == SIM_TEXT  # type: ignore[union-attr]


async def test_thinking_blocks_only_when_thinking_is_enabled(sim: Simulator) -> None:
    """Reasoning comes back as thinking blocks when the request enabled thinking, and not otherwise."""
    toml = config("openai.up", profile(sim, "openai.up", "sim-ok-r3"))
    async with gateway(toml) as server, sdk(server) as client:
        plain = await client.messages.create(model="", max_tokens=2000, messages=MESSAGES)
        async with client.messages.stream(
            model="", max_tokens=2000, messages=MESSAGES, thinking={"type": "enabled", "budget_tokens": 1024}
        ) as stream:
            final = await stream.get_final_message()
    assert [b.type for b in plain.content] == ["text"]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "lorem ipsum dolor"  # type: ignore[union-attr]


async def test_cut_stream_raises_in_the_sdk(sim: Simulator) -> None:
    """A stream cut after output ends with event: error and no message_stop, and the SDK raises."""
    toml = config("anthropic.up", profile(sim, "anthropic.up", "sim-cut-a2", protocol="anthropic"))
    async with gateway(toml) as server, sdk(server) as client:
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as info:
            await read_text(client, seen)
        raw = await post(server, "/v1/messages", {"model": "", "max_tokens": 100, "messages": MESSAGES, "stream": True})
    assert "".join(seen) == "Hello from"
    assert isinstance(info.value.body, dict) and info.value.body["error"]["type"] == "overloaded_error"
    names = [name for name, _ in raw.events()]
    assert names[0] == "message_start" and names[-1] == "error"
    assert "message_stop" not in names


async def test_auth_with_x_api_key(sim: Simulator) -> None:
    """The SDK's x-api-key authenticates; a wrong key is a 401 authentication_error, nothing forwarded."""
    toml = config("openai.up", profile(sim, "openai.up", "sim-ok"))
    async with gateway(toml) as server:
        async with sdk(server, "wrong") as bad:
            with pytest.raises(anthropic.AuthenticationError) as info:
                await bad.messages.create(model="", max_tokens=100, messages=MESSAGES)
        assert sim.log == []
        async with sdk(server) as good:
            message = await good.messages.create(model="", max_tokens=100, messages=MESSAGES)
    assert isinstance(info.value.body, dict)
    assert info.value.body == {"type": "error", "error": {"type": "authentication_error", "message": _401}}
    assert message.content[0].text == SIM_TEXT  # type: ignore[union-attr]


_401 = "invalid or missing API key (send Authorization: Bearer <key> or x-api-key: <key>)"


@pytest.mark.parametrize(
    ("model", "error", "kind"),
    [
        ("sim-429-ra2", anthropic.RateLimitError, "rate_limit_error"),
        ("sim-context", anthropic.BadRequestError, "invalid_request_error"),
        ("sim-500", anthropic.APIStatusError, "api_error"),
    ],
)
async def test_errors_in_anthropic_shape(sim: Simulator, model: str, error: type[Exception], kind: str) -> None:
    """Rate limits, context-window errors and total failures arrive in Anthropic's error shape."""
    toml = config("openai.up", profile(sim, "openai.up", model))
    async with gateway(toml) as server, sdk(server) as client:
        with pytest.raises(error) as info:
            await client.messages.create(model="", max_tokens=100, messages=MESSAGES)
    body: Any = info.value.body  # type: ignore[attr-defined]
    assert body["type"] == "error" and body["error"]["type"] == kind


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
async def test_refusal_has_stop_reason_refusal(sim: Simulator, protocol: str) -> None:
    """A refusal is a normal message with stop_reason refusal, streamed and not."""
    family = PROTOCOLS[protocol][0]
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "sim-refusal", protocol=protocol))
    async with gateway(toml) as server, sdk(server) as client:
        message = await client.messages.create(model="", max_tokens=100, messages=MESSAGES)
        async with client.messages.stream(model="", max_tokens=100, messages=MESSAGES) as stream:
            final = await stream.get_final_message()
    assert message.stop_reason == final.stop_reason == "refusal"
    assert message.content == final.content == []


async def test_image_blocks_are_accepted(sim: Simulator) -> None:
    """Base64 and URL image blocks are translated and forwarded to a vision upstream."""
    toml = config("anthropic.up", profile(sim, "anthropic.up", "sim-ok", protocol="anthropic"))
    content: Any = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "text", "text": "What is in these pictures?"},
    ]
    async with gateway(toml) as server, sdk(server) as client:
        message = await client.messages.create(
            model="", max_tokens=100, messages=[{"role": "user", "content": content}]
        )
    assert message.content[0].text == SIM_TEXT  # type: ignore[union-attr]
    assert len(sim.log) == 1


async def test_models_list_in_anthropic_shape(sim: Simulator) -> None:
    """The Anthropic SDK's models.list() reads the gateway's models in Anthropic's list shape."""
    toml = config("openai.up", profile(sim, "openai.up", "sim-ok"))
    async with gateway(toml) as server, sdk(server) as client:
        page = await client.models.list()
        one = await client.models.retrieve("openai.up")
    assert [m.id for m in page.data] == ["openai.up", "sim-ok"]
    assert page.has_more is False
    assert one.type == "model" and one.id == "openai.up"
