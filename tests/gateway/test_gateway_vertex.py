"""The gateway's Anthropic surface over Vertex AI: pass-through, the three-cloud chain, and signed thinking replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest
from gateway_support import GATEWAY_KEY, config, gateway, post

from google_creds import service_account_file
from turnout.sim import Simulator
from turnout.sim.wire.anthropic import SIGNATURE, VERTEX_SIGNATURE

MODEL = "claude-sonnet-4-5"
BEDROCK_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_ID = "claude-sonnet-4-5@20250929"
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}


def profiles(sim: Simulator, tmp_path: Path, *, model: str = MODEL, bedrock: bool = True) -> str:
    """Anthropic → (Bedrock →) Vertex, every profile configured with the one canonical name."""
    credentials = service_account_file(tmp_path, sim.google_token_uri)
    after_anthropic = "bedrock.main" if bedrock else "vertex.main"
    out = (
        f'[providers.models.anthropic.main]\nuri = "{sim.url}"\napi_key = "sk-up-anthropic"\nmodel = "{model}"\n'
        f'fallback = ["{after_anthropic}"]\n'
        f'[providers.models.vertex.main]\nuri = "{sim.url}"\nproject = "sim-project"\nregion = "us-east5"\n'
        f'model = "{model}"\ncredentials_file = "{credentials}"\n'
    )
    if bedrock:
        out += (
            f'[providers.models.bedrock.main]\nuri = "{sim.url}"\nregion = "us-east-1"\n'
            f'api_key = "bedrock-api-key-0001"\nmodel = "{model}"\nfallback = ["vertex.main"]\n'
        )
    return out


def no_retries() -> str:
    return "[reliability]\nprovider_retries = 0\n"


def toml(sim: Simulator, tmp_path: Path, **kw: Any) -> str:
    return config("anthropic.main", profiles(sim, tmp_path, **kw)).replace(
        "[reliability]\nprovider_retries = 1\n", no_retries()
    )


def vertex_only(sim: Simulator, tmp_path: Path) -> str:
    return toml(sim, tmp_path).replace('default_provider = "anthropic.main"', 'default_provider = "vertex.main"')


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_anthropic_surface_passes_through_to_vertex(sim: Simulator, tmp_path: Path, streamed: bool) -> None:
    """A Messages body reaches Vertex's rawPredict with its own blocks, as it reaches Anthropic; served by Vertex."""
    body: dict[str, Any] = {
        "model": "",
        "max_tokens": 200,
        "system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}
        ],
        "top_k": 3,
        "stream": streamed,
    }
    async with gateway(vertex_only(sim, tmp_path)) as server:
        got = await post(server, "/v1/messages", body, headers={"anthropic-beta": "prompt-caching-2024-07-31"})
    assert got.status == 200, got.body
    assert got.headers["x-turnout-provider"] == "vertex.main" and got.headers["x-turnout-model"] == MODEL
    if streamed:
        assert b"event: message_stop" in got.body
    else:
        assert orjson.loads(got.body)["content"][0]["type"] == "text"
    entry = sim.log[-1]
    assert entry.protocol == "vertex-anthropic" and entry.model == VERTEX_ID and entry.outcome == "ok"
    assert entry.path.endswith(":streamRawPredict" if streamed else ":rawPredict")


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_three_cloud_chain_through_the_gateway(sim: Simulator, tmp_path: Path, streamed: bool) -> None:
    """Anthropic overloaded, Bedrock throttling: the Anthropic SDK's call is answered by Vertex, streamed or not."""
    sim.set_script({"models": {MODEL: {"steps": ["529"]}, BEDROCK_ID: {"steps": ["429"]}}})
    async with gateway(toml(sim, tmp_path)) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        messages: Any = [{"role": "user", "content": "hello"}]
        if streamed:
            async with client.messages.stream(model="", max_tokens=100, messages=messages) as stream:
                reply = await stream.get_final_message()
        else:
            raw = await client.messages.with_raw_response.create(model="", max_tokens=100, messages=messages)
            assert raw.headers["x-turnout-provider"] == "vertex.main"
            assert raw.headers["x-turnout-attempts"] == "3"
            reply = await raw.parse()
        await client.close()
    assert reply.content[0].type == "text" and reply.model == MODEL
    assert [(e.model, e.outcome) for e in sim.log] == [
        (MODEL, "status:529"),
        (BEDROCK_ID, "status:429"),
        (VERTEX_ID, "ok"),
    ]


async def first_turn(server: Any, streamed: bool) -> list[dict[str, Any]]:
    """One turn with thinking on; the assistant content as the client would replay it."""
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
    messages: Any = [{"role": "user", "content": "What is 17 times 3?"}]
    if streamed:
        async with client.messages.stream(model="", max_tokens=2000, thinking=THINKING, messages=messages) as stream:
            reply = await stream.get_final_message()
    else:
        reply = await client.messages.create(model="", max_tokens=2000, thinking=THINKING, messages=messages)
    await client.close()
    return [b.model_dump(exclude_none=True) for b in reply.content]


def second_turn_body(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "",
        "max_tokens": 2000,
        "thinking": THINKING,
        "messages": [
            {"role": "user", "content": "What is 17 times 3?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "And times 4?"},
        ],
    }


@pytest.mark.parametrize("streamed", [False, True])
async def test_anthropic_signed_thinking_is_not_replayed_to_vertex(
    sim: Simulator, tmp_path: Path, streamed: bool
) -> None:
    """Turn one is Anthropic's (its signature as issued); when Anthropic fails turn two, Vertex never sees the block.

    Vertex (like the simulator's) refuses a thinking block it did not sign: replaying it would make the turn a 400.
    """
    sim.set_script({"models": {MODEL: {"steps": ["ok-r4", "529"]}}})
    async with gateway(toml(sim, tmp_path, bedrock=False)) as server:
        content = await first_turn(server, streamed)
        assert content[0]["type"] == "thinking" and content[0]["signature"] == SIGNATURE  # unchanged for Anthropic
        got = await post(server, "/v1/messages", second_turn_body(content))
    assert got.status == 200, got.body
    assert got.headers["x-turnout-provider"] == "vertex.main"
    assert [(e.model, e.outcome) for e in sim.log] == [(MODEL, "ok"), (MODEL, "status:529"), (VERTEX_ID, "ok")]


@pytest.mark.parametrize("streamed", [False, True])
async def test_vertex_signed_thinking_goes_back_to_vertex_only(sim: Simulator, tmp_path: Path, streamed: bool) -> None:
    """Turn one is Vertex's: the client holds a stamped signature; Vertex gets it back as issued, Anthropic never.

    The simulator's Vertex refuses any signature but its own (a stamped one included), its Anthropic a Vertex one.
    """
    sim.set_script({"models": {MODEL: {"steps": ["529", "ok"]}, VERTEX_ID: {"steps": ["ok-r4"]}}})
    async with gateway(vertex_only(sim, tmp_path)) as server:
        content = await first_turn(server, streamed)
    assert content[0]["type"] == "thinking" and content[0]["signature"] == f"tn1!vertex!{VERTEX_SIGNATURE}"
    async with gateway(toml(sim, tmp_path, bedrock=False)) as server:
        again = await post(server, "/v1/messages", second_turn_body(content))  # Anthropic's 529: Vertex serves
        assert again.status == 200, again.body
        assert again.headers["x-turnout-provider"] == "vertex.main"
        back = await post(server, "/v1/messages", second_turn_body(content))  # Anthropic answers this time
    assert back.status == 200, back.body
    assert back.headers["x-turnout-provider"] == "anthropic.main"
    assert [(e.model, e.outcome) for e in sim.log] == [
        (VERTEX_ID, "ok"),
        (MODEL, "status:529"),
        (VERTEX_ID, "ok"),
        (MODEL, "ok"),
    ]


async def test_a_thinking_only_turn_becomes_text_for_another_cloud(sim: Simulator, tmp_path: Path) -> None:
    """An assistant turn holding only a foreign signed block keeps its thinking as text: the turns still alternate."""
    sim.set_script({"models": {MODEL: {"steps": ["529"]}}})
    body = second_turn_body([{"type": "thinking", "thinking": "It is 51.", "signature": SIGNATURE}])
    async with gateway(toml(sim, tmp_path, bedrock=False)) as server:
        got = await post(server, "/v1/messages", body)
    assert got.status == 200, got.body
    assert got.headers["x-turnout-provider"] == "vertex.main"


COUNTED: Any = [{"role": "user", "content": "how many tokens are in this request"}]


async def test_count_tokens_asks_vertex_for_claude(sim: Simulator, tmp_path: Path) -> None:
    """A Vertex Claude profile's count comes from Vertex's count-tokens:rawPredict, as the SDK reads it."""
    async with gateway(vertex_only(sim, tmp_path)) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        counted = await client.messages.count_tokens(model="", system="be brief", messages=COUNTED)
        await client.close()
        raw = await post(server, "/v1/messages/count_tokens", {"model": "", "messages": COUNTED})
    assert raw.headers["x-turnout-token-count"] == "upstream" and raw.headers["x-turnout-provider"] == "vertex.main"
    assert counted.input_tokens == 9  # the simulator counts words: 2 of the system prompt and 7
    assert raw.json()["input_tokens"] == 7
    assert sim.google.issued == 1


async def test_count_tokens_on_vertex_renews_an_expired_token_once(sim: Simulator, tmp_path: Path) -> None:
    """Google expired the token: the count gets a 401, renews the token and asks once more."""
    async with gateway(vertex_only(sim, tmp_path)) as server:
        first = await post(server, "/v1/messages/count_tokens", {"model": "", "messages": COUNTED})
        assert sim.google.expire() == 1
        second = await post(server, "/v1/messages/count_tokens", {"model": "", "messages": COUNTED})
    assert first.headers["x-turnout-token-count"] == second.headers["x-turnout-token-count"] == "upstream"
    assert second.json()["input_tokens"] == 7 and sim.google.issued == 2


async def test_count_tokens_asks_vertex_for_gemini(sim: Simulator, tmp_path: Path) -> None:
    """A Vertex Gemini profile's count is Vertex's countTokens' totalTokens."""
    cfg = vertex_only(sim, tmp_path).replace(
        f'model = "{MODEL}"\ncredentials_file', 'model = "gemini-2.5-pro"\ncredentials_file'
    )
    assert 'model = "gemini-2.5-pro"' in cfg
    async with gateway(cfg) as server:
        raw = await post(server, "/v1/messages/count_tokens", {"model": "", "system": "be brief", "messages": COUNTED})
    assert raw.headers["x-turnout-token-count"] == "upstream"
    assert raw.json()["input_tokens"] == 9
