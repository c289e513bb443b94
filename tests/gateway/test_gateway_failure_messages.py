"""The gateway's error message tells a client what failed where, as the library's does."""

from __future__ import annotations

from aiohttp import web
from gateway_support import GATEWAY_KEY, gateway, post

from servers import loopback_app

REJECTED = {"error": {"message": "Unsupported parameter: 'temperature'", "type": "invalid_request_error"}}


async def test_a_502_names_each_entry_and_quotes_a_rejected_requests_reason() -> None:
    """A walk that ends on a server error after a 400 is a 502 whose message names both entries and the 400's reason."""

    async def rejecting(request: web.Request) -> web.Response:
        return web.json_response(REJECTED, status=400)

    async def failing(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "backend down", "type": "server_error"}}, status=503)

    app = web.Application()
    app.router.add_post("/a/v1/chat/completions", rejecting)
    app.router.add_post("/b/v1/chat/completions", failing)
    async with loopback_app(app) as url:
        toml = f"""
default_provider = "openai.a"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 0
[providers.models.openai.a]
uri = "{url}/a/v1"
api_key = "sk-a-0000"
model = "m-a"
fallback = ["openai.b"]
[providers.models.openai.b]
uri = "{url}/b/v1"
api_key = "sk-b-0000"
model = "m-b"
"""
        async with gateway(toml) as server:
            raw = await post(
                server, "/v1/chat/completions", {"model": "", "messages": [{"role": "user", "content": "hi"}]}
            )
    assert raw.status == 502
    message = raw.json()["error"]["message"]
    assert "event 1 (openai.a/m-a, try 1/1): non_retryable" in message
    assert "reason=\"Unsupported parameter: 'temperature'\"" in message
    assert "event 2 (openai.b/m-b, try 1/1): retryable; kind=provider_server" in message
    assert "backend down" not in message  # a server error's own text is not quoted
