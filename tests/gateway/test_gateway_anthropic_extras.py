"""The Anthropic surface beyond plain chat: system messages between turns, anthropic-beta, count_tokens,
and blocks the gateway does not model passed through to an Anthropic upstream.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from capture import CAPTURED_TEXT, capture_upstream
from gateway_support import GATEWAY_KEY, SIM_TEXT, config, gateway, post, profile

from turnout.sim import Simulator
from turnout.sim.wire.anthropic import SIGNATURE

CLAUDE_CODE_MESSAGES: Any = [
    {"role": "user", "content": "Read the file."},
    {"role": "assistant", "content": "Done."},
    {"role": "system", "content": "The user switched to plan mode."},
    {"role": "user", "content": [{"type": "text", "text": "Now plan the change."}]},
]
DOCUMENT = {
    "type": "document",
    "source": {"type": "text", "media_type": "text/plain", "data": "The sky is blue."},
    "title": "facts",
    "citations": {"enabled": True},
    "cache_control": {"type": "ephemeral"},
}


def anthropic_profile(url: str, name: str = "anthropic.main") -> str:
    return f'[providers.models.{name}]\nuri = "{url}"\napi_key = "sk-up-cap"\nmodel = "claude-cap"\n'


def openai_profile(url: str, name: str = "openai.main") -> str:
    return f'[providers.models.{name}]\nuri = "{url}/v1"\napi_key = "sk-up-cap"\nmodel = "gpt-cap"\n'


@pytest.mark.parametrize("protocol", ["anthropic", "openai", "responses", "gemini", "ollama"])
async def test_mid_conversation_system_message_is_served(sim: Simulator, protocol: str) -> None:
    """A role 'system' message between turns (as Claude Code sends) is served by every upstream protocol."""
    family = {"responses": "openai"}.get(protocol, protocol)
    toml = config(f"{family}.main", profile(sim, f"{family}.main", "sim-ok", protocol=protocol))
    async with gateway(toml) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        reply = await client.messages.create(model="", max_tokens=50, messages=CLAUDE_CODE_MESSAGES)
        await client.close()
    assert reply.content[0].type == "text" and reply.content[0].text == SIM_TEXT


async def test_anthropic_upstream_gets_system_folded_beta_forwarded_and_blocks_unchanged() -> None:
    """To an Anthropic upstream: system folded, anthropic-beta forwarded, unmodelled blocks and fields unchanged."""
    body = {
        "model": "",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            *CLAUDE_CODE_MESSAGES[:3],
            {"role": "user", "content": [DOCUMENT, {"type": "text", "text": "What colour is the sky?"}]},
        ],
        "tools": [{"type": "bash_20250124", "name": "bash"}],
        "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "ex"}],
    }
    beta = "mid-conversation-system-2026-04-07, mcp-client-2025-04-04"
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
            raw = await post(
                server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01", "anthropic-beta": beta}
            )
        seen = cap.last
    assert raw.status == 200 and raw.json()["content"][0]["text"] == CAPTURED_TEXT
    assert seen.headers["anthropic-beta"] == beta
    sent = seen.body
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "The user switched to plan mode."},
    ]
    assert sent["messages"][2]["content"][0] == DOCUMENT
    assert sent["tools"] == body["tools"] and sent["mcp_servers"] == body["mcp_servers"]
    assert sent["model"] == "claude-cap" and "stream" not in sent


async def test_untranslatable_block_to_another_protocol_is_a_400_before_any_call() -> None:
    """A document block on a route with only an OpenAI upstream is a 400 naming the field and the route."""
    body = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": [DOCUMENT]}]}
    async with capture_upstream() as cap:
        async with gateway(config("openai.main", openai_profile(cap.url))) as server:
            raw = await post(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
        assert cap.seen == []
    assert raw.status == 400
    message = raw.json()["error"]["message"]
    assert "messages[0].content[0] (document)" in message and "anthropic protocol" in message
    assert "(route '')" in message


async def test_a_fallback_that_cannot_carry_a_block_is_skipped() -> None:
    """A document block goes to the Anthropic fallback of a route whose primary speaks OpenAI."""
    body = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": [DOCUMENT]}]}
    async with capture_upstream() as cap:
        main = openai_profile(cap.url).replace('model = "gpt-cap"\n', 'model = "gpt-cap"\nfallback = ["anthropic.b"]\n')
        async with gateway(config("openai.main", main, anthropic_profile(cap.url, "anthropic.b"))) as server:
            raw = await post(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
        assert [s.path for s in cap.seen] == ["/v1/messages"]
    assert raw.status == 200 and raw.headers["x-turnout-provider"] == "anthropic.b"


async def test_invalid_anthropic_beta_is_a_400() -> None:
    """An anthropic-beta header that is not a list of beta names is refused, never forwarded."""
    body = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
            raw = await post(server, "/v1/messages", body, headers={"anthropic-beta": "x\u00e9; rm -rf"})
        assert cap.seen == []
    assert raw.status == 400 and "anthropic-beta" in raw.json()["error"]["message"]


async def test_count_tokens_asks_an_anthropic_upstream(sim: Simulator) -> None:
    """The SDK's count_tokens gets the Anthropic upstream's own count, marked as such."""
    toml = config("anthropic.main", profile(sim, "anthropic.main", "sim-ok", protocol="anthropic"))
    body = {"model": "", "system": "be brief", "messages": CLAUDE_CODE_MESSAGES}
    async with gateway(toml) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        counted = await client.messages.count_tokens(model="", system="be brief", messages=CLAUDE_CODE_MESSAGES)
        await client.close()
        raw = await post(server, "/v1/messages/count_tokens", body, headers={"anthropic-version": "2023-06-01"})
    assert raw.headers["x-turnout-token-count"] == "upstream"
    assert counted.input_tokens == raw.json()["input_tokens"] == 16  # the simulator counts words: 2+3+1+6+4


async def test_count_tokens_estimates_for_other_upstreams(sim: Simulator) -> None:
    """Without an upstream count the answer is the documented estimate, and the header says so."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        counted = await client.messages.count_tokens(model="", messages=CLAUDE_CODE_MESSAGES)
        await client.close()
        raw = await post(server, "/v1/messages/count_tokens", {"model": "", "messages": CLAUDE_CODE_MESSAGES})
    assert raw.headers["x-turnout-token-count"] == "estimate"
    assert counted.input_tokens == raw.json()["input_tokens"] > 0
    assert len(sim.log) == 0


@pytest.mark.parametrize("streamed", [False, True])
async def test_thinking_signatures_reach_the_client(sim: Simulator, streamed: bool) -> None:
    """An Anthropic upstream's thinking block signature reaches the client unchanged, whole and streamed."""
    toml = config("anthropic.main", profile(sim, "anthropic.main", "sim-ok-r4", protocol="anthropic"))
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    async with gateway(toml) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        if streamed:
            async with client.messages.stream(
                model="", max_tokens=2000, thinking=thinking, messages=CLAUDE_CODE_MESSAGES
            ) as stream:
                reply = await stream.get_final_message()
        else:
            reply = await client.messages.create(
                model="", max_tokens=2000, thinking=thinking, messages=CLAUDE_CODE_MESSAGES
            )
        await client.close()
    block = reply.content[0]
    assert block.type == "thinking" and block.signature == SIGNATURE
    assert block.thinking.split() == ["lorem", "ipsum", "dolor", "sit"]


async def test_signed_thinking_passes_and_unsigned_thinking_is_left_out() -> None:
    """A signed thinking block reaches the Anthropic upstream unchanged; an unsigned one (it would refuse) does not."""
    signed = {"type": "thinking", "thinking": "plan", "signature": "EvQBsig"}
    unsigned = {"type": "thinking", "thinking": "other", "signature": ""}
    body = {
        "model": "",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [signed, {"type": "text", "text": "a"}]},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": [unsigned, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "more"},
        ],
    }
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
            raw = await post(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
        sent = cap.last.body["messages"]
    assert raw.status == 200
    assert sent[1]["content"] == [signed, {"type": "text", "text": "a"}]
    assert sent[3]["content"] == [{"type": "text", "text": "b"}]
