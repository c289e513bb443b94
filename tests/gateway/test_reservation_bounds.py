"""A limited key's reservation prices everything a request asks for, and its worst case is a real bound.

Every choice of OpenAI Chat's ``n`` is priced, and ``max_call_usd`` refuses on that; a call without ``max_tokens``
is sent the output bound its reservation priced, in every upstream family's own field; a call the client gave up on
holds its reservation until its upstream try ends, then counts what the provider billed.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from gateway_support import GATEWAY_KEY, get, post

from fakes import FakeClock
from servers import loopback_app
from turnout import Client
from turnout.core.estimate import LIMITED_OUTPUT_BOUND
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, StreamEvent, TextDelta, Usage
from turnout.gateway import Gateway, GatewayServer

TEAM_KEY = "gw-team-key-7"
PROMPT = "x" * 4000  # 1,004 input tokens by the estimate
ONE_ANSWER_USD = (1004 + 1000) / 1e6  # the worst case of one answer at $1/M, with max_tokens 1,000


class Upstream(Provider):
    """A fake OpenAI Chat upstream that holds each call until its gate opens; it keeps the requests it was sent."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.gate = asyncio.Event()
        self.arrived = asyncio.Event()
        self.requests: list[ChatRequest] = []
        self.usage = usage or Usage(input_tokens=1000, output_tokens=1000)

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.requests.append(request)
        self.arrived.set()
        await self.gate.wait()
        return ChatResponse(text="ok", model=model, usage=self.usage)

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        yield TextDelta(text="ok")

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(streaming=True, protocol="openai-chat")


def config(ledger: Path, key: str = "daily_limit_usd = 1.0\n", profile: str = "") -> str:
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\n{key}'
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        f"pricing = {{ input = 1.0, output = 1.0 }}\n{profile}"
    )


@asynccontextmanager
async def served(text: str, upstream: Upstream) -> AsyncIterator[GatewayServer]:
    clock = FakeClock()
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, env=clock.env, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4.1", "messages": [{"role": "user", "content": PROMPT}], **fields}


async def status_of(server: GatewayServer) -> dict[str, Any]:
    keys: list[dict[str, Any]] = (await get(server, "/status")).json()["keys"]
    return next(k for k in keys if k["key"] == "team")


# --- n: every choice is priced ----------------------------------------------------------------------


async def test_n_128_above_max_call_usd_is_refused_before_any_attempt(tmp_path: Path) -> None:
    """A request for n = 128 whose one answer fits ``max_call_usd`` but whose 128 do not is a 400 naming n; nothing
    is sent.
    """
    upstream = Upstream()
    upstream.gate.set()
    text = config(tmp_path / "l.sqlite3", key="max_call_usd = 0.01\n")
    async with served(text, upstream) as server:
        refused = await post(server, "/v1/chat/completions", chat(max_tokens=1000, n=128), key=TEAM_KEY)
        one = await post(server, "/v1/chat/completions", chat(max_tokens=1000), key=TEAM_KEY)
    assert refused.status == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("max_call_exceeded", "n")
    assert f"${128 * ONE_ANSWER_USD:.4f}" in error["message"] and "n = 128" in error["message"]
    assert one.status == 200
    assert len(upstream.requests) == 1 and upstream.requests[0].native is not None
    assert "n" not in upstream.requests[0].native.body  # the refused call never reached it


async def test_a_permitted_n_reserves_n_times_one_answer(tmp_path: Path) -> None:
    """A request for n = 4 within the limits reserves four times one answer's worst case while it runs, and reaches the
    upstream with its n.
    """
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:
        call = asyncio.ensure_future(post(server, "/v1/chat/completions", chat(max_tokens=1000, n=4), key=TEAM_KEY))
        await upstream.arrived.wait()
        during = await status_of(server)
        upstream.gate.set()
        answer = await call
    assert answer.status == 200
    assert during["in_flight"] == 1
    assert during["reserved_usd"] == pytest.approx(4 * ONE_ANSWER_USD)
    native = upstream.requests[0].native
    assert native is not None and native.body["n"] == 4


async def test_n_above_128_or_below_1_is_a_caller_error(tmp_path: Path) -> None:
    """Requests for n = 129 and n = 0 are 400s naming n, before any attempt (OpenAI allows 1 to 128)."""
    upstream = Upstream()
    upstream.gate.set()
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:
        answers = [await post(server, "/v1/chat/completions", chat(n=n), key=TEAM_KEY) for n in (129, 0)]
    assert [a.status for a in answers] == [400, 400]
    assert all(a.json()["error"]["param"] == "n" for a in answers)
    assert upstream.requests == []


# --- the output bound is sent ----------------------------------------------------------------------


async def test_a_limited_call_without_max_tokens_reserves_and_sends_the_bound(tmp_path: Path) -> None:
    """A limited key's call without max_tokens holds the worst case of LIMITED_OUTPUT_BOUND output tokens and
    reaches the upstream with that bound, its pass-through body included; an unlimited key's call is left alone.
    """
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:
        call = asyncio.ensure_future(post(server, "/v1/chat/completions", chat(), key=TEAM_KEY))
        await upstream.arrived.wait()
        during = await status_of(server)
        upstream.gate.set()
        assert (await call).status == 200
        assert (await post(server, "/v1/chat/completions", chat())).status == 200
    limited, unlimited = upstream.requests
    assert during["reserved_usd"] == pytest.approx((1004 + LIMITED_OUTPUT_BOUND) / 1e6)
    assert limited.max_tokens == LIMITED_OUTPUT_BOUND
    assert limited.native is not None and limited.native.body["max_completion_tokens"] == LIMITED_OUTPUT_BOUND
    assert unlimited.max_tokens is None
    assert unlimited.native is not None and "max_completion_tokens" not in unlimited.native.body


async def test_the_bound_is_the_least_of_the_route_s_profiles(tmp_path: Path) -> None:
    """A profile's own max_tokens below the default bound is the bound a limited call is priced at and sent."""
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3", profile="max_tokens = 300\n"), upstream) as server:
        call = asyncio.ensure_future(post(server, "/v1/chat/completions", chat(), key=TEAM_KEY))
        await upstream.arrived.wait()
        during = await status_of(server)
        upstream.gate.set()
        assert (await call).status == 200
    assert during["reserved_usd"] == pytest.approx((1004 + 300) / 1e6)
    assert upstream.requests[0].max_tokens == 300


async def test_a_body_with_both_limits_is_sent_the_one_its_reservation_priced(tmp_path: Path) -> None:
    """max_tokens 50,000 beside max_completion_tokens 100: priced at 100, and the body passed through carries 100
    under one name only, so no upstream reads the larger.
    """
    upstream = Upstream()
    upstream.gate.set()
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:
        body = chat(max_tokens=50_000, max_completion_tokens=100)
        assert (await post(server, "/v1/chat/completions", body, key=TEAM_KEY)).status == 200
    native = upstream.requests[0].native
    assert native is not None and native.body["max_completion_tokens"] == 100 and "max_tokens" not in native.body


# --- every family receives the bound on the wire ------------------------------------------------------


def _answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The least answer of each protocol the recorder speaks."""
    if path.endswith("/chat/completions"):
        return {
            "id": "c",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
        }
    if path.endswith("/responses"):
        return {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "model": body.get("model"),
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9},
        }
    if path.endswith("/messages"):
        return {
            "id": "msg",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 7, "output_tokens": 2},
        }
    if path.endswith(":generateContent"):
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 2},
        }
    return {  # Ollama's /api/chat
        "model": body.get("model"),
        "message": {"role": "assistant", "content": "ok"},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 7,
        "eval_count": 2,
    }


@asynccontextmanager
async def recorder() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A loopback upstream of every protocol that records each request's path and JSON body."""
    seen: list[tuple[str, dict[str, Any]]] = []

    async def handle(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        seen.append((request.path, body))
        return web.json_response(_answer(request.path, body))

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    async with loopback_app(app) as url:
        yield url, seen


#: (profile, how its uri ends, extra profile lines, where its body carries the output bound).
FAMILIES = [
    ("openai.main", "/v1", "", ("max_completion_tokens",)),
    ("deepseek.main", "/v1", "", ("max_tokens",)),
    ("openai.resp", "/v1", 'wire_api = "responses"\n', ("max_output_tokens",)),
    ("anthropic.main", "", "", ("max_tokens",)),
    ("gemini.main", "/v1beta", "", ("generationConfig", "maxOutputTokens")),
    ("ollama.main", "", "", ("options", "num_predict")),
]


@pytest.mark.parametrize("surface", ["chat", "responses"])
@pytest.mark.parametrize(("name", "tail", "lines", "field"), FAMILIES, ids=[f[0] for f in FAMILIES])
async def test_every_family_receives_the_bound_of_a_limited_call(
    tmp_path: Path, surface: str, name: str, tail: str, lines: str, field: tuple[str, ...]
) -> None:
    """A limited key's request without an output bound, on the Chat Completions or the Responses surface, reaches
    each upstream family (passed through or translated) with LIMITED_OUTPUT_BOUND in its own field.
    """
    async with recorder() as (url, seen):
        text = (
            f'default_provider = "{name}"\n'
            f'[ledger]\npath = "{tmp_path / "l.sqlite3"}"\n'
            "[reliability]\nprovider_retries = 0\n"
            f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
            f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = 1.0\n'
            f'[providers.models.{name}]\nuri = "{url}{tail}"\napi_key = "sk-up"\nmodel = "m-1"\n'
            f"pricing = {{ input = 1.0, output = 1.0 }}\n{lines}"
        )
        client = Client.from_toml(text, surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            if surface == "chat":
                answer = await post(server, "/v1/chat/completions", chat(model=""), key=TEAM_KEY)
            else:
                answer = await post(server, "/v1/responses", {"model": "", "input": "hi"}, key=TEAM_KEY)
    assert answer.status == 200, answer.body
    [(_, body)] = seen
    value: Any = body
    for part in field:
        value = value[part]
    assert value == LIMITED_OUTPUT_BOUND


# --- a call the client gave up on ------------------------------------------------------------------------


async def test_a_call_the_client_gave_up_on_holds_its_reservation_then_counts_the_provider_s_usage(
    tmp_path: Path,
) -> None:
    """A client that hangs up on a non-streaming call while the upstream works: the call keeps its reservation
    until the upstream answers, then the key counts what the provider reported (not the worst case) and holds
    nothing; the ledger records the call cancelled with the provider's usage.
    """
    upstream = Upstream(usage=Usage(input_tokens=900, output_tokens=37))
    path = tmp_path / "l.sqlite3"
    async with served(config(path), upstream) as server:
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            request = asyncio.ensure_future(
                session.post(server.url + "/v1/chat/completions", json=chat(max_tokens=1000), headers=headers)
            )
            await upstream.arrived.wait()
            request.cancel()  # the client's timeout
            with pytest.raises(asyncio.CancelledError):
                await request
        gateway = server.gateway
        for _ in range(10_000):  # the gateway sees the hang-up (one turn of the loop at a time, no sleeping)
            if not gateway.in_flight:
                break
            await asyncio.sleep(0)
        held = await status_of(server)
        upstream.gate.set()
        await gateway.client.finish_abandoned()  # the upstream's answer, then the call's record and release
        after = await status_of(server)
        ledger = gateway.client.ledger
        assert ledger is not None
        await ledger.flush()
    assert gateway.in_flight == 0
    assert held["in_flight"] == 1 and held["reserved_usd"] == pytest.approx(ONE_ANSWER_USD)
    assert after["in_flight"] == 0 and after["reserved_usd"] == 0
    assert after["spent_usd"] == pytest.approx(937 / 1e6)
    db = sqlite3.connect(path)
    try:
        calls = db.execute("SELECT outcome FROM calls").fetchall()
        attempts = db.execute("SELECT input_tokens, output_tokens, usage_note FROM attempts").fetchall()
    finally:
        db.close()
    assert calls == [("cancelled",)]
    assert attempts == [(900, 37, None)]
