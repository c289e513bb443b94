"""A body the gateway accepts is one it can encode: JSON too deep to send on is a 400 that touches no upstream.

orjson parses 1024 levels of nesting and encodes 254: a body in between used to fail inside the walk, be retried
as a provider error on every entry and open their breakers (any client key could open other tenants'). Each case
runs a real gateway over real adapters of an ``a -> b`` chain (Chat Completions, then Anthropic) on a loopback
upstream that counts what it receives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from gateway_support import GATEWAY_KEY, gateway, get, post

from servers import loopback_app
from turnout.gateway import GatewayServer
from turnout.providers.openai_chat import OpenAIChatAdapter

CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m-a",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "sunny"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MESSAGES_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m-b",
    "content": [{"type": "text", "text": "sunny"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


@dataclass
class Upstream:
    """What the loopback upstream received: one path per request."""

    paths: list[str] = field(default_factory=list)


@asynccontextmanager
async def chain() -> AsyncIterator[tuple[GatewayServer, Upstream]]:
    """A gateway whose default profile ``openai.a`` falls back to ``anthropic.b`` (default retries and breakers)."""
    upstream = Upstream()

    async def chat(request: web.Request) -> web.Response:
        upstream.paths.append(request.path)
        return web.json_response(CHAT_ANSWER)

    async def messages(request: web.Request) -> web.Response:
        upstream.paths.append(request.path)
        return web.json_response(MESSAGES_ANSWER)

    async def count(request: web.Request) -> web.Response:
        upstream.paths.append(request.path)
        return web.json_response({"input_tokens": 7})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count)
    async with loopback_app(app) as url:
        toml = f"""
default_provider = "openai.a"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[providers.models.openai.a]
uri = "{url}/v1"
api_key = "sk-a-0000"
model = "m-a"
fallback = ["anthropic.b"]
[providers.models.anthropic.b]
uri = "{url}"
api_key = "sk-b-0000"
model = "m-b"
"""
        async with gateway(toml) as server:
            yield server, upstream


def deep(levels: int) -> bytes:
    """A JSON array nested ``levels`` deep (orjson cannot write one past 254)."""
    return b"[" * levels + b"]" * levels


def body_with(template: dict[str, Any], slot: str, levels: int = 300) -> bytes:
    """``template`` as JSON with the string ``slot`` replaced by a value nested ``levels`` deep."""
    return orjson.dumps(template).replace(orjson.dumps(slot), b'{"x": ' + deep(levels - 1) + b"}")


CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "", "input": "hi"}
DEEP = "DEEP-VALUE"
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("chat: forwarded metadata", "/v1/chat/completions", {**CHAT, "metadata": {"x": DEEP}}),
    ("chat: forwarded metadata, streamed", "/v1/chat/completions", {**CHAT, "stream": True, "metadata": {"x": DEEP}}),
    (
        "chat: a tool's parameters",
        "/v1/chat/completions",
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]},
    ),
    (
        "chat: a response_format schema, streamed",
        "/v1/chat/completions",
        {
            **CHAT,
            "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": DEEP}},
        },
    ),
    (
        "responses: text.format",
        "/v1/responses",
        {**RESPONSES, "text": {"format": {"type": "json_schema", "name": "w", "schema": DEEP}}},
    ),
    ("messages: input_schema", "/v1/messages", {**MESSAGES, "tools": [{"name": "f", "input_schema": DEEP}]}),
    (
        "messages: input_schema, streamed",
        "/v1/messages",
        {**MESSAGES, "stream": True, "tools": [{"name": "f", "input_schema": DEEP}]},
    ),
    (
        "count_tokens: input_schema",
        "/v1/messages/count_tokens",
        {"model": "", "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "f", "input_schema": DEEP}]},
    ),
]


def error_of(path: str, raw: Any) -> tuple[str, str]:
    """``(type, message)`` of an error body in the surface's own shape."""
    body = raw.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
    return body["error"]["type"], body["error"]["message"]


async def untouched(server: GatewayServer, upstream: Upstream) -> None:
    """No upstream received anything, no breaker or cooldown changed, and a plain call is served by the first entry."""
    assert upstream.paths == []
    status = (await get(server, "/status")).json()
    assert (status["breakers"], status["cooldowns"]) == ([], [])
    plain = await post(server, "/v1/chat/completions", CHAT)
    assert (plain.status, plain.headers["x-turnout-provider"], plain.headers["x-turnout-attempts"]) == (
        200,
        "openai.a",
        "1",
    )


@pytest.mark.parametrize(("what", "path", "template"), CASES, ids=[c[0] for c in CASES])
async def test_json_nested_too_deep_to_send_is_400_and_reaches_no_upstream(
    what: str, path: str, template: dict[str, Any]
) -> None:
    """A body nested 300 deep anywhere is a 400 in the surface's shape; repeated, it opens no breaker of the chain."""
    async with chain() as (server, upstream):
        for _ in range(3):
            raw = await post(server, path, body_with(template, DEEP))
            assert raw.status == 400, raw.body
            kind, message = error_of(path, raw)
            assert kind == "invalid_request_error"
            assert "nested deeper than 128 levels" in message
        await untouched(server, upstream)


async def test_a_body_just_inside_the_bound_is_served() -> None:
    """Nesting of 128 levels, the bound, is sent on as usual."""
    async with chain() as (server, upstream):
        raw = await post(server, "/v1/chat/completions", body_with({**CHAT, "metadata": DEEP}, DEEP, levels=127))
    assert raw.status == 200, raw.body
    assert upstream.paths == ["/v1/chat/completions"]


async def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    """A prompt full of brackets and escaped quotes is text, not depth."""
    text = '[[{"\\"' * 400
    async with chain() as (server, upstream):
        raw = await post(server, "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": text}]})
    assert raw.status == 200, raw.body
    assert upstream.paths == ["/v1/chat/completions"]


async def test_an_adapter_that_cannot_build_its_body_is_a_400_with_no_provider_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request the first entry's adapter cannot build is the client's 400: no attempt, no fallback, no breaker."""

    def broken(*args: object, **kwargs: object) -> dict[str, Any]:
        raise ValueError("a builder's bug")

    async with chain() as (server, upstream):
        with monkeypatch.context() as patch:
            patch.setattr(OpenAIChatAdapter, "build_body", broken)
            for stream in (False, True):
                raw = await post(server, "/v1/chat/completions", {**CHAT, "stream": stream})
                assert raw.status == 400, raw.body
                assert raw.json()["error"]["code"] == "invalid_request"
                assert "openai.a could not build the request body (ValueError)" in raw.json()["error"]["message"]
                assert raw.headers["x-turnout-attempts"] == "0"
        await untouched(server, upstream)
