"""Pools through the gateway over simulator upstreams: routing, failover, /status, /metrics and /v1/models."""

from __future__ import annotations

import asyncio
import re

import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, SIM_TEXT, config, gateway, get, post, profile
from test_gateway_observability import sample
from typer.testing import CliRunner

from turnout.cli.main import app
from turnout.sim import Simulator

EAST, WEST, BACKUP = "gpt-east", "gpt-west", "claude-backup"


def pooled(sim: Simulator, strategy: str = "ordered", *, default: str = "duo") -> str:
    pool = (
        f'[pools.duo]\nmembers = ["openai.east", "openai.west"]\nstrategy = "{strategy}"\n'
        'fallback = ["anthropic.backup"]\n'
        '[[model_routes]]\nhint = "gpt"\nmodel_provider = "duo"\nmodel = "gpt"\n'
    )
    return config(
        default,
        profile(sim, "openai.east", EAST),
        profile(sim, "openai.west", WEST),
        profile(sim, "anthropic.backup", BACKUP, protocol="anthropic"),
        extra=pool,
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_pool_default_serves_through_the_gateway_and_fails_over_between_members(
    sim: Simulator, stream: bool
) -> None:
    """The first member answers 500 (twice: one retry): the second serves; headers name it, no fallback notice."""
    sim.set_script({"models": {EAST: {"steps": ["500"]}}})
    async with gateway(pooled(sim)) as server:
        raw = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES, "stream": stream})
    assert raw.status == 200
    assert raw.headers["x-turnout-provider"] == "openai.west"
    assert raw.headers["x-turnout-model"] == WEST
    assert "x-turnout-fallback" not in raw.headers
    assert SIM_TEXT.split()[0] in raw.body.decode()
    assert [(e.model, e.outcome) for e in sim.log] == [(EAST, "status:500")] * 2 + [(WEST, "ok")]  # 1 retry


async def test_a_hint_to_a_pool_falls_back_beyond_it_with_the_notice_header(sim: Simulator) -> None:
    """hint:gpt reaches the pool; with both members down its Anthropic fallback serves, announced in a header."""
    sim.set_script({"models": {EAST: {"steps": ["503"]}, WEST: {"steps": ["503"]}}})
    async with gateway(pooled(sim, "latency", default="anthropic.backup")) as server:
        raw = await post(server, "/v1/chat/completions", {"model": "hint:gpt", "messages": MESSAGES})
    assert raw.status == 200
    assert raw.headers["x-turnout-provider"] == "anthropic.backup"
    assert "x-turnout-fallback" in raw.headers


async def test_status_shows_each_pool_member_with_its_load(sim: Simulator) -> None:
    """/status lists the pool, its strategy and fallback, and per member: in flight, calls, share, moving TTFT."""
    async with gateway(pooled(sim, "least_busy")) as server:
        for _ in range(4):
            assert (await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES})).status == 200
        status = (await get(server, "/status")).json()
    assert status["default_provider"] == "duo"
    (pool,) = status["pools"]
    assert (pool["name"], pool["strategy"], pool["fallback"]) == ("duo", "least_busy", ["anthropic.backup"])
    members = {m["profile"]: m for m in pool["members"]}
    assert set(members) == {"openai.east", "openai.west"}
    assert sum(m["calls"] for m in members.values()) == 4
    assert sum(m["share"] for m in members.values()) == pytest.approx(1.0)
    assert all(m["in_flight"] == 0 for m in members.values())
    assert all(m["ttft_ms"] is not None for m in members.values() if m["calls"])
    assert "sk-" not in orjson.dumps(status).decode()


async def test_metrics_expose_pool_members_labelled_only_from_the_configuration(sim: Simulator) -> None:
    """/metrics has in-flight, calls and moving TTFT per (pool, member); no client string becomes a label."""
    async with gateway(pooled(sim)) as server:
        for _ in range(3):
            await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES})
        await post(server, "/v1/chat/completions", {"model": "hint:nothing\x1b[31m", "messages": MESSAGES})
        text = (await get(server, "/metrics")).body.decode()
    assert sample(text, "turnout_pool_member_calls_total", pool="duo", member="openai.east") == 3
    assert sample(text, "turnout_pool_member_calls_total", pool="duo", member="openai.west") == 0
    assert sample(text, "turnout_pool_member_in_flight", pool="duo", member="openai.east") == 0
    assert sample(text, "turnout_pool_member_ttft_seconds", pool="duo", member="openai.east") > 0
    pool_lines = [line for line in text.splitlines() if line.startswith("turnout_pool_member")]
    assert {line.split("{")[1].split("}")[0] for line in pool_lines} <= {
        'member="openai.east",pool="duo"',
        'member="openai.west",pool="duo"',
        'pool="duo",member="openai.east"',
        'pool="duo",member="openai.west"',
    }


async def test_models_list_the_pools_hint_and_hide_profiles_only_reached_through_the_pool(sim: Simulator) -> None:
    """GET /v1/models lists hint:gpt; members only reachable through the pool are not listed as profiles."""
    async with gateway(pooled(sim)) as server:
        ids = [m["id"] for m in (await get(server, "/v1/models")).json()["data"]]
    assert "hint:gpt" in ids
    assert "openai.east" not in ids and "openai.west" not in ids and "anthropic.backup" not in ids


async def test_the_default_pool_is_open_only_to_keys_that_may_reach_it(sim: Simulator) -> None:
    """An empty model reaches a default pool only for keys that may reach the pool (default access, a hint to it)."""
    keys = (
        '[gateway.keys.pooled]\nkey = "gw-pooled"\nmodels = ["hint:gpt"]\n'
        '[gateway.keys.other]\nkey = "gw-other"\nmodels = ["anthropic.backup"]\n'
    )
    text = pooled(sim).replace("[ledger]", keys + "[ledger]", 1)
    async with gateway(text) as server:
        chat = {"model": "", "messages": MESSAGES}
        assert (await post(server, "/v1/chat/completions", chat)).status == 200
        assert (await post(server, "/v1/chat/completions", chat, key="gw-pooled")).status == 200
        refused = await post(server, "/v1/chat/completions", chat, key="gw-other")
        assert refused.status == 404
        assert (
            await post(server, "/v1/chat/completions", {**chat, "model": "anthropic.backup"}, key="gw-other")
        ).status == 200
    assert [e.model for e in sim.log] == [EAST, EAST, BACKUP]


async def test_turnout_status_prints_a_running_gateways_pools_and_hedging(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``turnout status --gateway URL`` lists each pool with its members' calls, and whether calls hedge."""
    monkeypatch.setenv("TURNOUT_GATEWAY_KEY", GATEWAY_KEY)
    hedge = "[reliability.hedge]\nenabled = true\nafter_ms = 60000\n"
    async with gateway(pooled(sim, "ordered") + hedge) as server:
        for _ in range(3):
            assert (await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES})).status == 200
        result = await asyncio.to_thread(CliRunner().invoke, app, ["status", "--gateway", server.url])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  pool     duo  ordered" in lines
    assert any(re.fullmatch(r" {11}openai\.east  in flight 0  calls 3 \(100%\)  ttft \d+ ms", line) for line in lines)
    assert "           openai.west  in flight 0  calls 0 (0%)" in lines
    assert (
        "  hedging  0 hedges of 3 calls (0.0%); answered first: the hedge 0, the first entry 0; budget left 5" in lines
    )
