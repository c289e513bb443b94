"""Pools over real HTTP against the simulator: the latency strategy learns, members fail over, fallbacks serve."""

from __future__ import annotations

from typing import Any

import pytest
from it_support import client, config, profile, trail

from turnout.core.errors import AllProvidersFailed
from turnout.core.types import TextDelta
from turnout.sim import Simulator

SLOW, FAST, BACKUP = "gpt-east", "gpt-west", "claude-backup"


def pool_config(sim: Simulator, strategy: str = "latency", **pool: Any) -> dict[str, Any]:
    """Two OpenAI members (the simulator tells them apart by model) and an Anthropic fallback."""
    cfg = config(
        {
            "openai.east": profile(sim, "openai", SLOW),
            "openai.west": profile(sim, "openai", FAST),
            "anthropic.backup": profile(sim, "anthropic", BACKUP),
        },
        default="duo",
        retries=0,
    )
    cfg["pools"] = {
        "duo": {"members": ["openai.east", "openai.west"], "strategy": strategy, "fallback": ["anthropic.backup"]}
        | pool
    }
    cfg["reliability"]["affinity"] = {"enabled": False}  # these calls repeat one prompt: the strategy alone decides
    return cfg


async def streamed(c: Any) -> tuple[str, Any]:
    stream = c.stream("hello")
    text = "".join([e.text async for e in stream if isinstance(e, TextDelta)])
    return text, stream.response


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_latency_pool_measures_each_member_then_prefers_the_faster(sim: Simulator, streaming: bool) -> None:
    """First call: the first member; second: the unmeasured one; then every call goes to the faster member."""
    sim.set_script({"models": {SLOW: {"steps": [{"do": "ok", "delay": 0.25}]}, FAST: {"steps": ["ok"]}}})
    async with client(pool_config(sim, explore=0.0)) as c:
        served = []
        for _ in range(8):
            if streaming:
                text, reply = await streamed(c)
                assert text == "Hello from the Turnout simulator."
            else:
                reply = await c.chat("hello")
            assert reply.fallback is None
            served.append(reply.served.provider)
        assert served == ["openai.east"] + ["openai.west"] * 7
        loads = {m["profile"]: m for m in c.status()["pools"][0]["members"]}
        assert loads["openai.east"]["ttft_ms"] > loads["openai.west"]["ttft_ms"]
        assert loads["openai.west"]["share"] == pytest.approx(7 / 8)
    assert [e.model for e in sim.log] == [SLOW] + [FAST] * 7


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_failing_member_hands_the_call_to_the_other(sim: Simulator, streaming: bool) -> None:
    """The member the pool picks answers 500: the other member serves over HTTP, with no notice."""
    sim.set_script({"models": {SLOW: {"steps": ["500"]}}})
    async with client(pool_config(sim, "ordered")) as c:
        reply = (await streamed(c))[1] if streaming else await c.chat("hello")
    assert reply.served.provider == "openai.west" and reply.fallback is None
    assert [(p, o) for p, _, o, _ in trail(reply.attempts)][-1] == ("openai.west", "ok")
    assert [(e.model, e.outcome) for e in sim.log] == [(SLOW, "status:500"), (FAST, "ok")]


@pytest.mark.parametrize("streaming", [False, True])
async def test_with_every_member_down_the_pools_fallback_serves(sim: Simulator, streaming: bool) -> None:
    """Both members answer 503: the pool's Anthropic fallback serves, with the cross-family notice."""
    sim.set_script({"models": {SLOW: {"steps": ["503"]}, FAST: {"steps": ["503"]}}})
    async with client(pool_config(sim, "least_busy")) as c:
        reply = (await streamed(c))[1] if streaming else await c.chat("hello")
    assert reply.served.provider == "anthropic.backup"
    assert reply.fallback is not None and reply.fallback.shown
    assert sim.log[-1].model == BACKUP


async def test_every_entry_down_fails_with_the_attempts_of_members_and_fallback(sim: Simulator) -> None:
    """Members and fallback all failing: AllProvidersFailed lists each upstream try."""
    sim.set_script({"models": {SLOW: {"steps": ["500"]}, FAST: {"steps": ["500"]}, BACKUP: {"steps": ["500"]}}})
    async with client(pool_config(sim, "weighted")) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.chat("hello")
    assert sorted(a.provider for a in info.value.attempts) == ["anthropic.backup", "openai.east", "openai.west"]
    assert info.value.attempts[-1].provider == "anthropic.backup"
