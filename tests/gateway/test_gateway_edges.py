"""In front of browsers: cross-site requests, non-JSON bodies and unknown Host names are refused, logged, counted."""

from __future__ import annotations

import logging

import aiohttp
import orjson
import pytest
from gateway_support import Raw, fake_gateway, sample

from fakes import Fleet
from turnout.config import load_config_toml
from turnout.core.errors import ConfigError

OPEN = """
default_provider = "openai.main"
[ledger]
enabled = false
[gateway]
{gateway}
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
"""
CHAT = orjson.dumps({"model": "", "messages": [{"role": "user", "content": "hi"}]})
MESSAGES = orjson.dumps({"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
#: What a page on another site sends without a CORS preflight (a "simple" request).
SIMPLE = {"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}


async def send(url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> Raw:
    async with aiohttp.ClientSession() as session, session.request(method, url + path, data=body, headers=headers) as r:
        return Raw(r.status, r.headers, await r.read())


async def test_a_cross_site_simple_request_to_an_open_gateway_is_refused_before_any_call() -> None:
    """The browser's cross-site text/plain POST to a gateway without keys is 403 cross_site; nothing goes upstream."""
    fleet = Fleet()
    async with fake_gateway(OPEN.format(gateway=""), fleet) as (server, _):
        chat = await send(server.url, "POST", "/v1/chat/completions", SIMPLE, CHAT)
        messages = await send(
            server.url, "POST", "/v1/messages", {**SIMPLE, "anthropic-version": "2023-06-01"}, MESSAGES
        )
        status = await send(server.url, "GET", "/status", {"Sec-Fetch-Site": "cross-site"})
        origin_only = await send(server.url, "GET", "/metrics", {"Origin": "https://evil.example"})
        metrics = (await send(server.url, "GET", "/metrics", {})).body.decode()
    assert chat.status == 403 and chat.json()["error"]["code"] == "cross_site"
    assert messages.status == 403 and messages.json()["error"]["type"] == "permission_error"
    assert (status.status, origin_only.status) == (403, 403)
    assert fleet.calls("openai.main") == []
    assert sample(metrics, "turnout_gateway_refused_total", reason="cross_site") == 4


async def test_json_routes_refuse_bodies_that_are_not_json_in_their_surface_shape() -> None:
    """text/plain, a form or no Content-Type on a JSON route is 415 in that surface's error shape."""
    fleet = Fleet()
    async with fake_gateway(OPEN.format(gateway=""), fleet) as (server, _):
        plain = await send(server.url, "POST", "/v1/chat/completions", {"Content-Type": "text/plain"}, CHAT)
        form = await send(
            server.url, "POST", "/v1/responses", {"Content-Type": "application/x-www-form-urlencoded"}, b"input=hi"
        )
        bare = await send(server.url, "POST", "/v1/messages", {"anthropic-version": "2023-06-01"}, MESSAGES)
        json_charset = await send(
            server.url, "POST", "/v1/chat/completions", {"Content-Type": "application/json; charset=utf-8"}, CHAT
        )
    assert plain.status == form.status == bare.status == 415
    assert plain.json()["error"]["code"] == "unsupported_media_type"
    assert form.json()["error"]["code"] == "unsupported_media_type"
    assert bare.json()["type"] == "error" and bare.json()["error"]["type"] == "invalid_request_error"
    assert json_charset.status == 200
    assert len(fleet.calls("openai.main")) == 1


@pytest.mark.parametrize("path", ["/status", "/metrics", "/", "/v1/models"])
async def test_an_unknown_host_name_is_refused_so_dns_rebinding_reads_nothing(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Host: attacker.example (a rebound name) gets 421 unknown_host on every state route, with a log line."""
    async with fake_gateway(OPEN.format(gateway=""), Fleet()) as (server, _):
        with caplog.at_level(logging.WARNING, logger="turnout.gateway"):
            raw = await send(server.url, "GET", path, {"Host": f"attacker.example:{server.port}"})
        loopback = await send(server.url, "GET", path, {"Host": f"localhost:{server.port}"})
    assert raw.status == 421
    assert b"unknown_host" in raw.body
    assert loopback.status == 200
    assert "refused GET" in caplog.text and "attacker.example" in caplog.text


async def test_health_answers_any_host_and_allowed_hosts_adds_public_names() -> None:
    """/health answers whatever the Host (probes use the pod address); allowed_hosts names more; '*' any."""
    named = OPEN.format(gateway='allowed_hosts = ["gateway.example.com"]')
    async with fake_gateway(named, Fleet()) as (server, _):
        health = await send(server.url, "GET", "/health", {"Host": "10.1.2.3"})
        public = await send(server.url, "GET", "/status", {"Host": "GATEWAY.example.com:443"})
        other = await send(server.url, "GET", "/status", {"Host": "api.example.com"})
    async with fake_gateway(OPEN.format(gateway='allowed_hosts = ["*"]'), Fleet()) as (server, _):
        anything = await send(server.url, "GET", "/status", {"Host": "api.example.com"})
    assert (health.status, public.status, other.status, anything.status) == (200, 200, 421, 200)


async def test_an_origin_cors_allows_and_the_gateways_own_origin_pass() -> None:
    """A cross-site request from an origin in cors_origins is served; so is a same-origin one."""
    fleet = Fleet()
    cors = OPEN.format(gateway='cors_origins = ["https://app.example"]')
    async with fake_gateway(cors, fleet) as (server, _):
        json = {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}
        allowed = await send(
            server.url, "POST", "/v1/chat/completions", {**json, "Origin": "https://app.example"}, CHAT
        )
        own = {"Content-Type": "application/json", "Origin": server.url, "Sec-Fetch-Site": "same-origin"}
        same = await send(server.url, "POST", "/v1/chat/completions", own, CHAT)
        other = await send(server.url, "POST", "/v1/chat/completions", {**json, "Origin": "https://evil.example"}, CHAT)
    assert (allowed.status, same.status, other.status) == (200, 200, 403)
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"


@pytest.mark.parametrize("host", ["http://x.example", "x.example:443", "x.example/path", ""])
def test_an_allowed_host_that_is_not_a_bare_name_fails_with_its_key_path(host: str) -> None:
    """allowed_hosts takes names and addresses only: a scheme, port or path fails when the config loads."""
    with pytest.raises(ConfigError) as caught:
        load_config_toml(OPEN.format(gateway=f'allowed_hosts = ["{host}"]'))
    assert "gateway.allowed_hosts" in str(caught.value.path)


def test_allowed_hosts_takes_names_and_addresses() -> None:
    """allowed_hosts accepts DNS names, IPv4 and IPv6 addresses and '*'."""
    text = OPEN.format(gateway='allowed_hosts = ["gateway.example.com", "10.0.0.1", "::1", "*"]')
    assert load_config_toml(text).gateway.allowed_hosts == ["gateway.example.com", "10.0.0.1", "::1", "*"]
