"""Hostile request input: numbers the gateway cannot send, wrong JSON types, unbounded strings, metric labels."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from gateway_support import GATEWAY_KEY, Ended, fake_gateway, get, post

from fakes import Fleet
from turnout.gateway import GatewayServer

BASE = f"""
default_provider = "openai.main"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 0
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
[providers.models.openai.open]
api_key = "sk-open"
"""

CHAT: dict[str, Any] = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES: dict[str, Any] = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
TOOL_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}


@asynccontextmanager
async def served(fleet: Fleet, text: str = BASE) -> AsyncIterator[GatewayServer]:
    async with fake_gateway(text, fleet) as (server, _):
        yield server


def raw_json(body: Any) -> bytes:
    """JSON text with Python's encoder, which writes integers of any size (orjson refuses them)."""
    return json.dumps(body).encode()


def nothing_sent(fleet: Fleet) -> bool:
    return all(not p.calls for p in fleet.built.values())


BIG = 2**64
OPENAI_BIG = [
    {**CHAT, "max_tokens": BIG},
    {**CHAT, "max_completion_tokens": 2**63},
    {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": {**TOOL_SCHEMA, "maximum": BIG}}}]},
    {**CHAT, "seed": -(2**63) - 1},
    {**CHAT, "metadata": {"deep": [[{"n": 10**30}]]}},
]
ANTHROPIC_BIG = [
    {**MESSAGES, "max_tokens": BIG},
    {**MESSAGES, "tools": [{"name": "f", "input_schema": {**TOOL_SCHEMA, "minimum": -(2**70)}}]},
    {
        **MESSAGES,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"n": BIG}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ],
    },
]


@pytest.mark.parametrize(
    ("path", "body"),
    [*(("/v1/chat/completions", b) for b in OPENAI_BIG), *(("/v1/messages", b) for b in ANTHROPIC_BIG)],
)
async def test_integers_beyond_64_bits_are_400_before_any_upstream_call(path: str, body: Any) -> None:
    """An integer outside the signed 64-bit range anywhere in the body is a 400; nothing reaches the walk."""
    fleet = Fleet()
    async with served(fleet) as server:
        raw = await post(server, path, raw_json(body))
    assert raw.status == 400, raw.body
    assert raw.json()["error"]["type"] == "invalid_request_error"
    assert "64-bit" in raw.json()["error"]["message"]
    assert nothing_sent(fleet)


async def test_long_digit_runs_in_text_and_large_valid_integers_pass() -> None:
    """Digits inside strings and integers just inside the range are served as usual."""
    fleet = Fleet()
    content = "order 123456789012345678901234567890"
    body = {**CHAT, "messages": [{"role": "user", "content": content}], "seed": 2**63 - 1}
    async with served(fleet) as server:
        raw = await post(server, "/v1/chat/completions", raw_json(body))
    assert raw.status == 200, raw.body
    assert fleet.calls("openai.main") == ["gpt-4.1"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": "10"}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "stream": "yes"}, "stream"),
        ("/v1/chat/completions", {**CHAT, "temperature": "0.5"}, "temperature"),
        ("/v1/chat/completions", {**CHAT, "n": "1"}, "n"),
        ("/v1/messages", {**MESSAGES, "max_tokens": "10"}, "max_tokens"),
        ("/v1/messages", {**MESSAGES, "stream": 1}, "stream"),
    ],
)
async def test_wrong_json_types_are_rejected_not_coerced(path: str, body: Any, field: str) -> None:
    """A string where a number or boolean belongs is a 400 naming the field, never coerced."""
    fleet = Fleet()
    async with served(fleet) as server:
        raw = await post(server, path, body)
    assert raw.status == 400, raw.body
    assert field in raw.json()["error"]["message"]
    assert nothing_sent(fleet)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "model": "openai.open/" + "m" * 300}),
        ("/v1/chat/completions", {**CHAT, "model": "hint:" + "x" * 9000}),
        ("/v1/chat/completions", {**CHAT, "user": "u" * 401}),
        ("/v1/messages", {**MESSAGES, "model": "m" * 257}),
        ("/v1/messages", {**MESSAGES, "metadata": {"user_id": "u" * 401}}),
    ],
)
async def test_client_strings_are_bounded(path: str, body: Any) -> None:
    """A model over 256 characters or a user id over 400 is a 400; nothing is served or echoed."""
    fleet = Fleet()
    async with served(fleet) as server:
        raw = await post(server, path, body)
    assert raw.status == 400, raw.body
    assert "x-turnout-model" not in raw.headers
    assert len(raw.body) < 1000
    assert nothing_sent(fleet)


async def test_metrics_label_only_configured_models() -> None:
    """A model a client names on an unpinned profile is counted under 'other'; configured models keep theirs."""
    fleet = Fleet()
    async with served(fleet) as server:
        for i in range(3):
            assert (
                await post(server, "/v1/chat/completions", {**CHAT, "model": f"openai.open/free-{i}"})
            ).status == 200
        assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
        metrics = (await get(server, "/metrics")).body.decode()
    assert "free-" not in metrics
    assert 'turnout_upstream_attempts_total{model="other",outcome="ok",provider="openai.open"} 3.0' in metrics
    assert 'turnout_upstream_attempts_total{model="gpt-4.1",outcome="ok",provider="openai.main"} 1.0' in metrics


def test_histogram_buckets_count_a_value_at_a_bound_in_that_bucket() -> None:
    """A duration equal to a bucket's bound counts in that bucket (Prometheus `le`), larger ones in +Inf."""
    from turnout.gateway.metrics import Metrics

    m = Metrics()
    m.fold([Ended(surface="openai", status=200, seconds=seconds) for seconds in (0.005, 0.0050001, 1000.0)])
    text = m.render().decode()
    assert 'turnout_gateway_request_duration_seconds_bucket{le="0.005",surface="openai"} 1.0' in text
    assert 'turnout_gateway_request_duration_seconds_bucket{le="0.01",surface="openai"} 2.0' in text
    assert 'turnout_gateway_request_duration_seconds_bucket{le="120.0",surface="openai"} 2.0' in text
    assert 'turnout_gateway_request_duration_seconds_bucket{le="+Inf",surface="openai"} 3.0' in text
    assert 'turnout_gateway_requests_total{status="200",surface="openai"} 3.0' in text
