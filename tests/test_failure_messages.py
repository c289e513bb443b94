"""Failure messages a user can act on, through real HTTP on loopback: which entry, which try, and what to fix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey

from servers import free_port, loopback_app
from turnout import AllProvidersFailed, Client, Environment
from turnout.providers.http import connect_failure

UNSUPPORTED = {
    "error": {
        "message": (
            "Unsupported parameter: 'temperature' is not supported with this model. key=sk-proj-abcdefghij0123456789"
        ),
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_parameter",
    }
}


async def _instant(seconds: float) -> None:
    return None


def _client(*uris: str, retries: int = 2) -> Client:
    names = [f"p{i}" for i in range(len(uris))]
    profiles = "".join(
        f'[providers.models.openai.{name}]\nuri = "{uri}"\napi_key = "sk-{name}-secret-0000"\nmodel = "m-{name}"\n'
        + (f'fallback = ["openai.{names[i + 1]}"]\n' if i + 1 < len(names) else "")
        for i, (name, uri) in enumerate(zip(names, uris, strict=True))
    )
    toml = f'default_provider = "openai.p0"\n[ledger]\nenabled = false\n[reliability]\nprovider_retries = {retries}\n'
    return Client.from_toml(toml + profiles, ledger=False, env=Environment(sleep=_instant))


@asynccontextmanager
async def upstream(status: int, body: object, path: str = "/v1/chat/completions") -> AsyncIterator[str]:
    """A loopback upstream answering every chat call at ``path`` with ``status`` and ``body``."""

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post(path, answer)
    async with loopback_app(app) as url:
        yield url


async def _failure(client: Client) -> AllProvidersFailed:
    async with client:
        with pytest.raises(AllProvidersFailed) as info:
            await client.chat("a private prompt", temperature=0.3)
    return info.value


async def test_every_event_names_its_entry_and_numbers_its_try_from_one() -> None:
    """``event n (profile/model, try t/max)``: a first try is try 1, and there are as many events as attempts."""
    async with upstream(503, {"error": {"message": "overloaded", "type": "server_error"}}) as url:
        error = await _failure(_client(f"{url}/v1", f"{url}/v1"))
    lines = str(error).split("\n")
    assert lines[0] == f"All model providers/models failed after {len(error.attempts)} failure event(s). Events:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        f"event {n} (openai.p{(n - 1) // 3}/m-p{(n - 1) // 3}, try {(n - 1) % 3 + 1}/3)" for n in range(1, 7)
    ]


async def test_a_rejected_request_carries_the_providers_reason_scrubbed_of_keys() -> None:
    """When every entry answers 400, each event quotes why (without the key shape it held); never the prompt."""
    async with upstream(400, UNSUPPORTED) as url:
        error = await _failure(_client(f"{url}/v1", f"{url}/v1"))
    message = str(error)
    assert message.count("reason=\"Unsupported parameter: 'temperature' is not supported with this model.") == 2
    assert "kind=client_error" in message
    assert "sk-proj-abcdefghij0123456789" not in message and "sk-p0-secret" not in message
    assert "a private prompt" not in message
    assert [a.reason for a in error.attempts] == [a.reason for a in error.attempts[:1]] * 2
    assert error.attempts[0].reason is not None and len(error.attempts[0].reason) <= 200


async def test_a_uri_missing_v1_is_an_endpoint_not_found_that_names_the_uri() -> None:
    """A 404 that is not the provider's model error says to check the profile's uri, not the model id."""
    async with upstream(200, {}) as url:  # serves /v1/chat/completions; the profile forgot /v1
        error = await _failure(_client(url))
    message = str(error)
    assert "kind=endpoint_not_found" in message and "check the profile's uri (a missing /v1?)" in message
    assert "kind=model_not_found" not in message


async def test_a_model_the_provider_does_not_know_still_says_check_the_model() -> None:
    """A 404 whose body is the provider's model error keeps the model hint."""
    body = {
        "error": {
            "message": "The model `m-p0` does not exist",
            "type": "invalid_request_error",
            "code": "model_not_found",
        }
    }
    async with upstream(404, body) as url:
        error = await _failure(_client(f"{url}/v1"))
    assert "kind=model_not_found" in str(error) and "check the configured model id" in str(error)


async def test_a_refused_connection_says_refused_and_shows_host_and_port() -> None:
    """Nothing listening: the event says the connection was refused, and where."""
    port = free_port()
    error = await _failure(_client(f"http://127.0.0.1:{port}/v1", retries=0))
    message = str(error)
    assert "kind=connect_refused" in message
    assert f'reason="connection refused by 127.0.0.1:{port}"' in message
    assert error.attempts[0].detail == "connection:refused"


async def test_a_tls_handshake_failure_says_tls_and_shows_host_and_port() -> None:
    """https:// to a plain-HTTP server: the event says the TLS handshake failed, and where."""
    async with upstream(200, {}) as url:
        port = url.rsplit(":", 1)[1]
        error = await _failure(_client(f"https://127.0.0.1:{port}/v1", retries=0))
    message = str(error)
    assert "kind=tls" in message and f'reason="TLS handshake failed with 127.0.0.1:{port}"' in message


def test_a_dns_failure_is_told_apart_from_a_refusal() -> None:
    """The connector's DNS error reads ``dns``, a refusal ``refused``, a dropped connection ``reset``, else None."""
    key = ConnectionKey("api.example.invalid", 443, True, True, None, None, None)
    assert connect_failure(aiohttp.ClientConnectorDNSError(key, OSError(-2, "Name or service not known"))) == "dns"
    assert connect_failure(aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))) == "refused"
    assert connect_failure(aiohttp.ServerDisconnectedError()) == "reset"
    assert connect_failure(aiohttp.ClientPayloadError("cut")) is None
