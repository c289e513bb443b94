"""/status, /metrics and the access log: what the gateway tells operators, and what it never tells them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest
from gateway_support import GATEWAY_KEY, TWO_PROFILES, get, post, sample

from fakes import FakeClock, Fleet, err
from turnout import Client
from turnout.config import key_id
from turnout.gateway import Gateway, GatewayServer

BASE = TWO_PROFILES
PROMPT = "PROMPT-SENTINEL what is the weather"
CHAT = {"model": "", "messages": [{"role": "user", "content": PROMPT}]}


@asynccontextmanager
async def served(fleet: Fleet, text: str = BASE) -> AsyncIterator[tuple[GatewayServer, FakeClock]]:
    clock = FakeClock()
    client = Client.from_toml(text, adapter_builder=fleet, env=clock.env, ledger=False)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server, clock


async def test_status_shows_cooldowns_dead_keys_and_recent_attempts() -> None:
    """/status lists profiles and routes, cooldowns with remaining seconds, dead keys with their rest, and counts."""
    fleet = Fleet(anthropic__prod=[err(401, "bad key")], openai__backup=[err(429, headers={"retry-after": "30"})])
    async with served(fleet) as (server, clock):
        await post(server, "/v1/chat/completions", CHAT)
        clock.now += 1
        await post(server, "/v1/chat/completions", CHAT)  # another call: the keys' rejections are confirmed
        dead_at = clock.now
        clock.now += 4
        status = (await get(server, "/status")).json()
    assert [p["name"] for p in status["profiles"]] == ["anthropic.prod", "openai.backup"]
    assert [p["cooling_down"] for p in status["profiles"]] == [False, True]
    assert status["routes"] == [{"hint": "hint:cheap", "provider": "openai.backup", "model": "gpt-4.1"}]
    assert status["dead_keys"] == [
        {
            "key_id": kid,
            "state": "dead",
            "strikes": 1,
            "dead_until": dead_at + 60.0,
            "remaining_seconds": 56.0,
            "probe_until": None,
        }
        for kid in sorted([key_id("sk-ant-POOL-1"), key_id("sk-ant-POOL-2")])
    ]
    assert status["cooldowns"] == [
        {"key": "openai.backup", "profile": "openai.backup", "key_id": None, "remaining_seconds": 25.0}
    ]
    assert status["recent_attempts"]["by_outcome"] == {"cooldown_skip": 1, "non_retryable": 4, "rate_limited": 1}
    assert status["recent_attempts"]["by_provider"]["openai.backup"] == {"cooldown_skip": 1, "rate_limited": 1}
    assert status["status"] == "ok"
    assert "sk-" not in orjson.dumps(status).decode()


async def test_metrics_count_requests_attempts_fallbacks_and_latency() -> None:
    """/metrics exposes requests, attempts by outcome, fallbacks, retries, cooldowns and the histograms."""
    fleet = Fleet(anthropic__prod=[err(503), err(429)], openai__backup=["from backup"])
    single_key = BASE.replace('api_keys = ["sk-ant-POOL-1", "sk-ant-POOL-2"]', 'api_key = "sk-ant-PLANTED"')
    async with served(fleet, single_key) as (server, _):
        await post(server, "/v1/chat/completions", CHAT)
        await post(server, "/v1/chat/completions", {**CHAT, "stream": True})
        await post(server, "/v1/chat/completions", CHAT, key="wrong")
        text = (await get(server, "/metrics")).body.decode()
    assert sample(text, "turnout_gateway_requests_total", surface="openai", status="200") == 2
    assert sample(text, "turnout_gateway_requests_total", surface="openai", status="401") == 1
    prod = {"provider": "anthropic.prod", "model": "claude-sonnet-4-5"}
    assert sample(text, "turnout_upstream_attempts_total", outcome="retryable", **prod) == 1
    assert sample(text, "turnout_upstream_attempts_total", outcome="rate_limited", **prod) == 1
    assert sample(text, "turnout_retries_total", **prod) == 1
    assert (
        sample(text, "turnout_fallbacks_total", requested_provider="anthropic.prod", served_provider="openai.backup")
        == 2
    )
    assert sample(text, "turnout_cooldowns_active") == 1
    assert sample(text, "turnout_upstream_latency_seconds_count", provider="openai.backup") == 2
    assert sample(text, "turnout_upstream_ttft_seconds_count", provider="openai.backup") == 1  # the streamed one
    assert sample(text, "turnout_gateway_overhead_seconds_count", surface="openai") == 2
    assert "sk-" not in text and "PROMPT" not in text


async def test_two_gateways_in_one_process_keep_separate_metrics() -> None:
    """Each gateway has its own registry, so two in one process never collide."""
    async with served(Fleet()) as (one, _), served(Fleet()) as (two, _):
        await post(one, "/v1/chat/completions", CHAT)
        first = (await get(one, "/metrics")).body.decode()
        second = (await get(two, "/metrics")).body.decode()
    assert sample(first, "turnout_gateway_requests_total", surface="openai", status="200") == 1
    assert sample(second, "turnout_gateway_requests_total", surface="openai", status="200") is None


async def test_access_log_is_one_json_line_without_prompt_answer_or_key(caplog: pytest.LogCaptureFixture) -> None:
    """Each request logs one JSON line with route, attempts, fallback and caller id, and no content or key."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=["ANSWER-SENTINEL"])
    caplog.set_level(logging.INFO, logger="turnout.gateway.access")
    async with served(fleet) as (server, _):
        await post(server, "/v1/chat/completions", CHAT)
        await post(server, "/v1/chat/completions", CHAT, key="wrong-key")
    lines = [r.getMessage() for r in caplog.records if r.name == "turnout.gateway.access"]
    assert len(lines) == 2
    ok, denied = (orjson.loads(line) for line in lines)
    assert ok["method"] == "POST" and ok["path"] == "/v1/chat/completions"
    assert (ok["status"], ok["provider"], ok["model"], ok["attempts"], ok["fallback"]) == (
        200,
        "openai.backup",
        "gpt-4.1",
        3,
        True,
    )
    assert ok["caller"] == key_id(GATEWAY_KEY)
    assert ok["duration_ms"] >= 0
    assert (denied["status"], denied["caller"], denied["attempts"]) == (401, None, 0)
    for line in lines:
        for secret in ("PROMPT-SENTINEL", "ANSWER-SENTINEL", GATEWAY_KEY, "wrong-key", "sk-"):
            assert secret not in line
