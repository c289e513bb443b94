"""Bedrock through the whole path: Client and gateway → walk → the Bedrock adapter (SigV4) → the simulator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from it_support import client, config, profile, trail, upstream

from turnout.core.errors import AllProvidersFailed
from turnout.core.types import TextDelta
from turnout.sim import Simulator
from turnout.sim.aws import ACCESS_KEY, EXPIRED_TOKEN, SECRET_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))

from gateway_support import GATEWAY_KEY, gateway, post

CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture(autouse=True)
def _sim_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's AWS keys in the environment, where botocore's chain finds them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


def bedrock(sim: Simulator, model: str, **extra: object) -> dict[str, object]:
    """A Bedrock profile on the simulator, signing with the environment's keys."""
    return {"uri": sim.url, "region": "us-east-1", "model": model, **extra}


async def test_chat_and_stream_are_signed_and_served(sim: Simulator) -> None:
    """A Bedrock profile answers through SigV4, whole and streamed, with usage from the answer."""
    cfg = config({"bedrock.main": bedrock(sim, CLAUDE)})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
        streamed = [e async for e in c.stream("hello there")]
    assert reply.text == "Hello from the Turnout simulator."
    assert reply.usage is not None and reply.usage.output_tokens == 5
    assert "".join(e.text for e in streamed if isinstance(e, TextDelta)) == reply.text
    assert await upstream(sim, 2) == [(CLAUDE, "ok"), (CLAUDE, "ok")]
    assert sim.log[0].path == "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse"


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_overloaded_fails_over_to_bedrock(sim: Simulator, stream: bool) -> None:
    """Claude on Anthropic overloaded (529): the same request is served by Claude on Bedrock."""
    cfg = config(
        {
            "anthropic.main": profile(sim, "anthropic", "sim-529", fallback=["bedrock.backup"]),
            "bedrock.backup": bedrock(sim, CLAUDE),
        },
        retries=0,
    )
    async with client(cfg) as c:
        if stream:
            turn = c.stream("hello there")
            text = "".join([e.text async for e in turn if isinstance(e, TextDelta)])
            reply = turn.response
        else:
            reply = await c.chat("hello there")
            text = reply.text
    assert text == "Hello from the Turnout simulator."
    assert reply.served.provider == "bedrock.backup" and reply.served.model == CLAUDE
    assert [a[2] for a in trail(reply.attempts)] == ["retryable", "ok"]


@pytest.mark.parametrize("stream", [False, True])
async def test_bedrock_throttling_moves_on(sim: Simulator, stream: bool) -> None:
    """Bedrock throttling (a 429, or a throttlingException frame before output) is a rate limit: the walk moves on."""
    model = "sim-inband-a0-ratelimit" if stream else "sim-429"
    cfg = config(
        {
            "bedrock.main": bedrock(sim, model, fallback=["anthropic.backup"]),
            "anthropic.backup": profile(sim, "anthropic", "sim-ok"),
        },
        retries=0,
    )
    async with client(cfg) as c:
        if stream:
            turn = c.stream("hello there")
            text = "".join([e.text async for e in turn if isinstance(e, TextDelta)])
            reply = turn.response
        else:
            reply = await c.chat("hello there")
            text = reply.text
    assert text == "Hello from the Turnout simulator."
    assert reply.attempts[0].provider == "bedrock.main"
    assert reply.attempts[0].outcome == "rate_limited"
    assert reply.served.provider == "anthropic.backup"


async def test_expired_session_token_is_a_classified_failure(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials the upstream says expired fail the entry (after one fresh try), never hang or crash."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", EXPIRED_TOKEN)
    cfg = config({"bedrock.main": bedrock(sim, CLAUDE)}, retries=0)
    async with client(cfg) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.chat("hello there")
    assert [a.status for a in info.value.attempts] == [403]
    assert [e.outcome for e in await sim.wait_for_log(2)] == ["status:403", "status:403"]


async def test_bedrock_api_key_through_the_client(sim: Simulator) -> None:
    """A Bedrock API key profile is served with a bearer token; the simulator logs its key id."""
    cfg = config({"bedrock.main": bedrock(sim, CLAUDE, api_key="bedrock-api-key-0001")})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert reply.text == "Hello from the Turnout simulator."
    assert sim.log[0].key_id is not None


def _gateway_config(sim: Simulator, first_model: str) -> str:
    return f"""
default_provider = "anthropic.main"
[ledger]
enabled = false
[reliability]
provider_retries = 0
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[providers.models.anthropic.main]
uri = "{sim.url}"
api_key = "sk-up-anthropic"
model = "{first_model}"
fallback = ["bedrock.backup"]
[providers.models.bedrock.backup]
uri = "{sim.url}"
region = "us-east-1"
model = "{CLAUDE}"
"""


@pytest.mark.parametrize("stream", [False, True])
async def test_gateway_anthropic_surface_fails_over_to_bedrock(sim: Simulator, stream: bool) -> None:
    """An Anthropic client of the gateway, Anthropic overloaded: answered by Claude on Bedrock, streamed and not."""
    body = {
        "model": "",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "stream": stream,
    }
    async with gateway(_gateway_config(sim, "sim-529")) as server:
        raw = await post(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
    assert raw.status == 200
    assert raw.headers["x-turnout-provider"] == "bedrock.backup"
    if stream:
        assert b"Hello" in raw.body and b"message_stop" in raw.body
    else:
        assert raw.json()["content"][0]["text"] == "Hello from the Turnout simulator."
    entries = await sim.wait_for_log(2)
    assert [(e.protocol, e.outcome) for e in entries] == [("anthropic", "status:529"), ("bedrock", "ok")]


async def test_extra_headers_ride_outside_the_signature(sim: Simulator) -> None:
    """A profile's extra headers are sent unsigned: the simulator's signature check still passes."""
    cfg = config(
        {"bedrock.main": bedrock(sim, CLAUDE, extra_headers={"x-team": "blue", "X-Forwarded-For": "10.1.2.3"})}
    )
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert reply.text == "Hello from the Turnout simulator."
    assert [e.outcome for e in await sim.wait_for_log(1)] == ["ok"]
