"""Honest statuses: upstream client errors, rejected requests, unknown routes, request ids and CORS."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, config, gateway, get, post, profile
from test_gateway_errors import BASE, CHAT, clean, served

from fakes import Fleet, err
from turnout import Client
from turnout.core.errors import ConfigError, RefusalError
from turnout.gateway import Gateway, GatewayServer
from turnout.sim import Simulator

ANTHROPIC_BODY = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("status", "anthropic_type"),
    [
        (400, "invalid_request_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
    ],
)
async def test_upstream_client_error_keeps_its_class(status: int, anthropic_type: str) -> None:
    """An upstream 400/404/413/422 on every entry reaches the client with that status, scrubbed, with x-turnout-*."""
    bad = err(status, "field 'foo' is invalid; key sk-ant-PLANTED-SECRET-1 rejected", error_code="invalid_value")
    fleet = Fleet(anthropic__prod=[bad], openai__backup=[bad])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", ANTHROPIC_BODY, headers=ANTHROPIC_HEADERS)
    assert oa.status == an.status == status
    assert oa.json()["error"]["code"] == "invalid_value"
    assert "field 'foo' is invalid" in oa.json()["error"]["message"]
    assert an.json()["error"]["type"] == anthropic_type
    assert "field 'foo' is invalid" in an.json()["error"]["message"]
    assert oa.headers["x-turnout-provider"] == "x.y" and oa.headers["x-turnout-attempts"] == "2"
    clean(oa)
    clean(an)


async def test_mixed_upstream_failures_stay_502() -> None:
    """A walk whose failures mix a client error with a server error is still the gateway's 502."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=[err(400, "bad field")])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
    assert oa.status == 502
    assert oa.json()["error"]["code"] == "all_providers_failed"


async def test_sdk_does_not_retry_an_upstream_400(sim: Simulator) -> None:
    """The openai SDK gets a BadRequestError at once: one upstream call, not three."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-400"))
    async with gateway(toml) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="", messages=MESSAGES)
        await client.close()
    assert len(sim.log) == 1


async def test_rejected_request_is_an_error_on_both_surfaces() -> None:
    """An upstream 400 content_policy_violation is OpenAI 400 content_policy_violation / Anthropic 400, not a 200."""
    rejected = err(400, "Your request was rejected by the safety system", error_code="content_policy_violation")
    assert isinstance(rejected, RefusalError) and rejected.request_rejected
    fleet = Fleet(anthropic__prod=[rejected])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
        an = await post(server, "/v1/messages", ANTHROPIC_BODY, headers=ANTHROPIC_HEADERS)
        streamed = await post(server, "/v1/chat/completions", {**CHAT, "stream": True})
    assert oa.status == an.status == streamed.status == 400
    assert oa.json()["error"]["code"] == "content_policy_violation"
    assert "rejected by the safety system" in oa.json()["error"]["message"]
    assert an.json()["error"]["type"] == "invalid_request_error"
    assert streamed.json()["error"]["code"] == "content_policy_violation"


async def test_in_band_refusal_stays_a_200_refusal() -> None:
    """A model's in-band refusal is not a rejected request: 200 in the refusal form."""
    refusal = RefusalError("the model refused: no.", provider="anthropic.prod", model="claude-x")
    assert not refusal.request_rejected
    fleet = Fleet(anthropic__prod=[refusal])
    async with served(fleet) as (server, _):
        oa = await post(server, "/v1/chat/completions", CHAT)
    assert oa.status == 200 and oa.json()["choices"][0]["message"]["refusal"] == "no."


async def test_unknown_route_and_method_answer_in_the_surface_shape() -> None:
    """An unknown path is a JSON 404 and a wrong method a JSON 405 with Allow, in the surface's error shape."""
    async with served(Fleet()) as (server, _):
        missing = await post(server, "/v1/nothing", {})
        missing_an = await post(server, "/v1/nothing", {}, headers=ANTHROPIC_HEADERS)
        wrong = await get(server, "/v1/chat/completions")
    assert missing.status == 404 and missing.json()["error"]["code"] == "unknown_url"
    assert missing_an.status == 404 and missing_an.json()["error"]["type"] == "not_found_error"
    assert wrong.status == 405 and wrong.headers["Allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong.headers["Content-Type"].startswith("application/json")


async def test_every_response_has_a_request_id_that_the_ledger_keeps(tmp_path: Path) -> None:
    """request-id and x-request-id are on every answer of every route; a call's id is its ledger call_id."""
    db = tmp_path / "ledger.sqlite"
    text = BASE.replace("[ledger]\nenabled = false", f'[ledger]\npath = "{db}"')
    client = Client.from_toml(text, adapter_builder=Fleet(), surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        ok = await post(server, "/v1/chat/completions", CHAT)
        streamed = await post(server, "/v1/chat/completions", {**CHAT, "stream": True})
        denied = await post(server, "/v1/chat/completions", CHAT, key="wrong")
        invalid = await post(server, "/v1/chat/completions", {"model": 5})
        missing = await get(server, "/nope")
        wrong_method = await get(server, "/v1/chat/completions")
        health = await get(server, "/health", key=None)
        models = await get(server, "/v1/models")
        page = await get(server, "/", key=None)
        await client.ledger.flush()  # type: ignore[union-attr]
    answers = (ok, streamed, denied, invalid, missing, wrong_method, health, models, page)
    assert [r.status for r in answers] == [200, 200, 401, 400, 404, 405, 200, 200, 200]
    ids = [r.headers["request-id"] for r in answers]
    assert len(set(ids)) == len(answers)
    assert all(r.headers["x-request-id"] == r.headers["request-id"] for r in answers)
    with sqlite3.connect(db) as conn:
        calls = {row[0] for row in conn.execute("SELECT call_id FROM calls")}
    assert calls == {ok.headers["request-id"], streamed.headers["request-id"]}


@asynccontextmanager
async def cors_gateway(origins: str) -> AsyncIterator[GatewayServer]:
    text = BASE.replace("[gateway]\n", f"[gateway]\ncors_origins = {origins}\n")
    async with served(Fleet(), text) as (server, _):
        yield server


async def _options(server: GatewayServer, origin: str) -> tuple[int, dict[str, str]]:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.options(server.url + "/v1/chat/completions", headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers)


async def test_cors_is_off_by_default() -> None:
    """Without cors_origins no answer carries Access-Control-Allow-Origin, and a preflight is refused."""
    async with served(Fleet()) as (server, _):
        ok = await post(server, "/v1/chat/completions", CHAT, headers={"Origin": "https://app.example"})
        status, headers = await _options(server, "https://app.example")
    assert "Access-Control-Allow-Origin" not in ok.headers
    assert status == 405 and "Access-Control-Allow-Origin" not in headers


async def test_cors_origins_allow_a_browser_client() -> None:
    """An allowed origin gets CORS headers and a 204 preflight; another origin gets none."""
    async with cors_gateway('["https://app.example"]') as server:
        ok = await post(server, "/v1/chat/completions", CHAT, headers={"Origin": "https://app.example"})
        streamed = await post(
            server, "/v1/chat/completions", {**CHAT, "stream": True}, headers={"Origin": "https://app.example"}
        )
        other = await post(server, "/v1/chat/completions", CHAT, headers={"Origin": "https://evil.example"})
        status, headers = await _options(server, "https://app.example")
    for answer in (ok, streamed):
        assert answer.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert answer.headers["Vary"] == "Origin"
        assert "request-id" in answer.headers["Access-Control-Expose-Headers"]
    assert "Access-Control-Allow-Origin" not in other.headers
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type"


def test_a_cors_origin_with_a_path_is_a_config_error() -> None:
    """cors_origins entries are origins; anything else fails at load with the key path."""
    with pytest.raises(ConfigError) as info:
        Client.from_toml(BASE.replace("[gateway]\n", '[gateway]\ncors_origins = ["https://a.example/x"]\n'))
    assert "cors_origins" in str(info.value)


async def test_message_start_reports_input_tokens(sim: Simulator) -> None:
    """A streamed Anthropic answer's message_start carries a non-zero input token count."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        async with client.messages.stream(model="", max_tokens=50, messages=MESSAGES) as stream:
            first = None
            async for event in stream:
                if event.type == "message_start":
                    first = event.message.usage.input_tokens
            final = await stream.get_final_message()
        await client.close()
    assert first is not None and first > 0
    assert final.usage.input_tokens > 0
