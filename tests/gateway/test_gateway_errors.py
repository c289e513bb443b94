"""Error mapping, routing, streaming boundaries and request validation, with fake providers (fast)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import orjson
import pytest
from gateway_support import GATEWAY_KEY, Raw, decode_header, fake_gateway, get, post

from fakes import FakeClock, Fleet, err
from turnout.core.errors import RefusalError
from turnout.core.types import ImagePart, TextDelta, Usage, UsageEvent
from turnout.gateway import GatewayServer

BASE = f"""
default_provider = "anthropic.prod"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 0
[providers.models.anthropic.prod]
api_key = "sk-ant-PLANTED-SECRET-1"
model = "claude-sonnet-4-5"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED-SECRET-2"
model = "gpt-4.1"
[providers.models.openai.bare]
api_key = "sk-bare"
"""

CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
PLANTED = ("PLANTED", "sk-ant", "sk-openai", "upstream detail")


def served(fleet: Fleet, text: str = BASE) -> AbstractAsyncContextManager[tuple[GatewayServer, FakeClock]]:
    return fake_gateway(text, fleet)


def clean(raw: Raw) -> None:
    for secret in PLANTED:
        assert secret not in raw.body.decode()
        assert all(secret not in v for v in raw.headers.values())


async def test_context_window_is_400_in_both_shapes() -> None:
    """A context-window failure is 400: OpenAI code context_length_exceeded, Anthropic invalid_request_error."""
    too_long = err(400, "upstream detail", error_code="context_length_exceeded")
    fleet = Fleet(anthropic__prod=[too_long], openai__backup=[too_long])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
    assert oa.status == an.status == 400
    assert oa.json()["error"]["code"] == "context_length_exceeded"
    assert oa.json()["error"]["param"] == "messages"
    assert an.json()["type"] == "error" and an.json()["error"]["type"] == "invalid_request_error"
    clean(oa)
    clean(an)


async def test_all_rate_limited_is_429_with_retry_after_rounded_up() -> None:
    """Every attempt rate limited: 429 with Retry-After = the soonest hint rounded up.

    On the second call both profiles cool down; the walk still tries them all, in order (the panic rule).
    """
    fleet = Fleet(
        anthropic__prod=[err(429, "upstream detail", headers={"retry-after": "2.5"})],
        openai__backup=[err(429, headers={"retry-after": "9"})],
    )
    async with served(fleet) as (server, clock):
        first = await post(server, "/v1/chat/completions", CHAT)
        clock.now += 1.2  # both profiles still cool down: the next call skips both, then tries both
        second = await post(server, "/v1/messages", MESSAGES)
    assert first.status == second.status == 429
    assert first.headers["Retry-After"] == "3"
    assert first.json()["error"]["type"] == "rate_limit_error"
    assert second.headers["Retry-After"] == "3"  # the first profile's new 2.5 s cooldown is the soonest to end
    assert second.json()["error"]["type"] == "rate_limit_error"
    assert second.headers["x-turnout-attempts"] == "4"
    assert fleet.calls("anthropic.prod") == ["claude-sonnet-4-5"] * 2 and len(fleet.calls("openai.backup")) == 2
    clean(first)


async def test_after_breakers_opened_an_all_rate_limited_walk_is_429_with_retry_after() -> None:
    """Both breakers open, then both entries rate limited: 429 with Retry-After, as on a fresh gateway (not 502)."""
    outage = [err(503), err(503), err(503)]
    fleet = Fleet(
        anthropic__prod=[*outage, err(429, headers={"retry-after": "7"})],
        openai__backup=[*outage, err(429, headers={"retry-after": "12"})],
    )
    async with served(fleet) as (server, _):
        opening = [(await post(server, "/v1/chat/completions", CHAT)).status for _ in range(3)]
        assert opening == [502, 502, 503]  # the third failed call on each entry opens both breakers
        status = (await get(server, "/status")).json()
        assert len(status["breakers"]) == 2
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
    assert oa.status == an.status == 429
    assert oa.headers["Retry-After"] == "7" and an.headers["Retry-After"] == "7"
    assert oa.json()["error"]["type"] == "rate_limit_error" and an.json()["error"]["type"] == "rate_limit_error"
    assert "circuit_breaker_open" not in oa.headers.get("x-turnout-attempts", "")
    clean(oa)


async def test_a_walk_whose_entries_are_all_behind_open_breakers_is_503_with_retry_after() -> None:
    """Both breakers open and both entries still failing: 503 with Retry-After until the first breaker's end."""
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=[err(503)])
    async with served(fleet) as (server, clock):
        opening = [await post(server, "/v1/chat/completions", CHAT) for _ in range(3)]
        assert [raw.status for raw in opening] == [502, 502, 503]  # the third call opened both breakers
        assert "Retry-After" not in opening[0].headers and opening[2].headers["Retry-After"] == "5"
        clock.now += 1.0
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
    assert oa.status == an.status == 503
    assert oa.headers["Retry-After"] == an.headers["Retry-After"] == "4"  # 5 s open, 1 s of it gone
    assert oa.json()["error"]["code"] == "providers_unavailable"
    assert len(fleet.calls("anthropic.prod")) == 5  # the panic rule tried both entries on both calls
    clean(oa)


async def test_rate_limited_without_hint_uses_the_cooldown() -> None:
    """Without a retry hint, Retry-After is the soonest cooldown end (10 s by default)."""
    fleet = Fleet(anthropic__prod=[err(429)], openai__backup=[err(429)])
    async with served(fleet) as (server, _):
        raw = await post(server, "/v1/chat/completions", CHAT)
    assert raw.status == 429
    assert raw.headers["Retry-After"] == "10"


async def test_mixed_failures_are_502_content_free() -> None:
    """A walk that failed otherwise is a 502 with the aggregate message and no provider text or key."""
    fleet = Fleet(anthropic__prod=[err(429, "upstream detail")], openai__backup=[err(500, "upstream detail")])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
    assert oa.status == an.status == 502
    assert oa.json()["error"]["message"].startswith("All model providers/models failed after 2 failure event(s)")
    assert oa.json()["error"]["type"] == "server_error"
    assert an.json()["error"]["type"] == "api_error"
    clean(oa)
    clean(an)


async def test_refusal_is_200_in_each_refusal_form() -> None:
    """A refusal is a normal answer: OpenAI message.refusal + content_filter, Anthropic stop_reason refusal."""
    refusal = RefusalError("the model refused: I can't help with that.", provider="anthropic.prod", model="claude-x")
    fleet = Fleet(anthropic__prod=[refusal])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
    assert oa.status == an.status == 200
    choice = oa.json()["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    assert choice["finish_reason"] == "content_filter"
    assert an.json()["stop_reason"] == "refusal" and an.json()["content"] == []
    assert oa.headers["x-turnout-provider"] == "anthropic.prod"


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("openai.bare", 400, "missing_model"),
        ("openai.bare/gpt-x", 200, None),
        ("openai.nope", 404, "model_not_found"),
        ("anthropic.prod/claude-opus-4-1", 404, "model_not_found"),
    ],
)
async def test_routing_errors(model: str, status: int, code: str | None) -> None:
    """An unpinned profile needs a model (400); an unlisted name or another model for a pinned profile is 404."""
    async with served(Fleet()) as (server, _):
        raw = await post(server, "/v1/chat/completions", {**CHAT, "model": model})
    assert raw.status == status
    if code is not None:
        assert raw.json()["error"]["code"] == code
        assert raw.json()["error"]["param"] == "model"


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/v1/chat/completions", b"{not json", "invalid request body: Invalid JSON"),
        ("/v1/chat/completions", {"model": "m", "messages": []}, "messages: List should have at least 1 item"),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ("/v1/chat/completions", {**CHAT, "n": 2}, "n can only be carried by an upstream speaking the openai-chat"),
        ("/v1/chat/completions", {**CHAT, "n": 2, "stream": True}, "n > 1 is served without streaming only"),
        ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_object"}}, "response_format"),
        ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens: Field required"),
        (
            "/v1/messages",
            {**MESSAGES, "tools": [{"type": "web_search_20250305", "name": "s"}]},
            "tools[0] (web_search_20250305) can only be carried by an upstream speaking the anthropic protocol",
        ),
        ("/v1/messages", {**MESSAGES, "tools": [{"name": "s"}]}, "tools[0]: a custom tool needs an input_schema"),
    ],
)
async def test_invalid_bodies_are_400_in_the_surface_shape(path: str, body: Any, fragment: str) -> None:
    """An invalid body is a 400 naming the field, in the surface's error shape, and nothing is forwarded."""
    fleet = Fleet()
    async with served(fleet) as (server, _):
        raw = await post(server, path, body)
    assert raw.status == 400
    error = raw.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert fleet.built == {} or all(not p.calls for p in fleet.built.values())


async def test_stream_failure_before_output_recovers_and_headers_name_the_recovery() -> None:
    """A stream that fails before any output is recovered; the headers name the entry that produced it."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=["from backup"])
    async with served(fleet) as (server, _):
        raw = await post(server, "/v1/chat/completions", {**CHAT, "stream": True})
    assert raw.status == 200
    assert raw.headers["x-turnout-provider"] == "openai.backup"
    assert raw.headers["x-turnout-model"] == "gpt-4.1"
    assert raw.headers["x-turnout-attempts"] == "2"
    assert "openai.backup" in decode_header(raw.headers["x-turnout-fallback"])
    data = [d for _, d in raw.events()]
    assert data[-1] == "[DONE]"
    assert orjson.loads(data[1])["choices"][0]["delta"] == {"content": "from backup"}
    assert orjson.loads(data[1])["model"] == "gpt-4.1"


async def test_stream_that_fails_everywhere_before_output_gets_an_error_status() -> None:
    """Until the first event nothing is sent, so a stream that fails everywhere is a proper HTTP error."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=[err(503)])
    async with served(fleet) as (server, _):
        raw = await post(server, "/v1/messages", {**MESSAGES, "stream": True})
    assert raw.status == 502
    assert raw.headers["Content-Type"].startswith("application/json")
    assert raw.json()["error"]["type"] == "api_error"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_interruption_after_output_ends_with_an_in_band_error(path: str) -> None:
    """After output, an interruption ends the SSE with an in-band error and never the completion signal."""
    steps: Sequence[Any] = [[TextDelta(text="partial "), UsageEvent(usage=Usage(output_tokens=1)), err(503)]]
    fleet = Fleet(anthropic__prod=steps)
    body = {**(CHAT if path.endswith("completions") else MESSAGES), "stream": True}
    async with served(fleet) as (server, _):
        raw = await post(server, path, body)
    assert raw.status == 200
    events = raw.events()
    last_name, last_data = events[-1]
    if path.endswith("completions"):
        assert orjson.loads(last_data)["error"]["code"] == "stream_interrupted"
        assert "[DONE]" not in [d for _, d in events]
    else:
        assert last_name == "error"
        assert orjson.loads(last_data)["error"]["type"] == "overloaded_error"
        assert "message_stop" not in [n for n, _ in events]
    assert fleet.calls("openai.backup") == []  # never replayed after output


async def test_images_and_tool_results_reach_the_provider() -> None:
    """Image parts and Anthropic tool results are translated into Turnout messages."""
    fleet = Fleet(anthropic__prod=["seen"])
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}
    body = {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]}
    tool_turn = {
        **MESSAGES,
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "P"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
        ],
    }
    async with served(fleet) as (server, _):
        assert (await post(server, "/v1/chat/completions", body)).status == 200
        assert (await post(server, "/v1/messages", tool_turn)).status == 200
    provider = next(p for (name, _), p in fleet.built.items() if name == "anthropic.prod")
    first, second = provider.requests
    assert first.messages[0].images == (ImagePart(url="data:image/png;base64,iVBORw0KGgo=", detail="low"),)
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2].tool_calls[0].arguments == '{"c":"P"}'
    assert (second.messages[3].tool_call_id, second.messages[3].text) == ("t1", "sunny")


async def test_draining_answers_503_and_health_reports_it() -> None:
    """Once draining, every new request gets 503 in the surface's shape and /health is 503."""
    async with served(Fleet()) as (server, _):
        assert (await get(server, "/health", key=None)).status == 200
        assert await server.gateway.drain(1.0)
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", MESSAGES)
        health = await get(server, "/health", key=None)
    assert oa.status == an.status == health.status == 503
    assert oa.json()["error"]["code"] == "shutting_down"
    assert an.json()["error"]["type"] == "overloaded_error"
    assert health.json() == {"status": "draining"}


async def test_non_chat_endpoints_need_a_key_except_health() -> None:
    """/status, /metrics and /v1/models need a key (an Anthropic-shaped 401 with anthropic-version); /health not."""
    async with served(Fleet()) as (server, _):
        statuses = [(await get(server, p, key=None)).status for p in ("/status", "/metrics", "/v1/models")]
        health = await get(server, "/health", key=None)
        anthropic_401 = await post(server, "/v1/messages", MESSAGES, key=None, headers={"x-api-key": "nope"})
    assert statuses == [401, 401, 401]
    assert health.status == 200
    assert anthropic_401.json()["error"]["type"] == "authentication_error"
