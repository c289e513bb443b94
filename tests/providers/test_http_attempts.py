"""What an attempt leaves behind: its connection handed back or closed, nothing armed, a credential's session."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from provider_kit import make_adapter

from servers import loopback_app
from turnout.core.errors import ProtocolError, ProviderConnectionError
from turnout.core.types import ChatRequest
from turnout.providers.http import Callee, HttpClient, Timeouts

CALLEE = Callee(profile="test.http", model="m-1")


_PEERS: list[int] = []


async def _ok(request: web.Request) -> web.StreamResponse:
    await request.read()
    peer = request.transport.get_extra_info("peername") if request.transport else None
    _PEERS.append(peer[1] if peer else -1)
    body, status = b'{"ok": true}', int(request.query.get("status", "200"))
    if request.query.get("size"):
        body = b"x" * int(request.query["size"])
    if "chunked" not in request.query:
        return web.Response(body=body, status=status, content_type="application/json")
    resp = web.StreamResponse(status=status)
    await resp.prepare(request)
    step = 4 if len(body) < 100 else 65536
    try:
        for i in range(0, len(body), step):
            await resp.write(body[i : i + step])
        await resp.write_eof()
    except ConnectionError:
        pass  # the client closed a body it would not read
    return resp


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """A loopback server answering every POST with a JSON body (``?status=``, ``?size=``, ``?chunked``)."""
    app = web.Application()
    app.router.add_post("/ok", _ok)
    _PEERS.clear()
    async with loopback_app(app, access_log=None) as base:
        yield base + "/ok"


@pytest.mark.parametrize("query", ["", "?chunked", "?status=429", "?status=429&chunked"])
async def test_a_post_read_to_its_end_hands_its_connection_back(url: str, query: str) -> None:
    """A post whose whole body was read leaves its connection in the pool; one cut short by a bound closes it."""
    http = HttpClient()
    bounds = Timeouts(connect=1.0, first_token=5.0, idle=5.0, total=10.0)
    try:
        for _ in range(3):
            resp = await http.post(url + query, headers={}, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
            assert resp.body == b'{"ok": true}' and resp.status in (200, 429)
        assert len(set(_PEERS)) == 1  # every post reused the first connection
        # larger than the socket buffers: still arriving when the bound stops reading it
        over = "&".join(part for part in (query.lstrip("?"), "size=8000000") if part)
        with pytest.raises(ProtocolError):
            await http.post(f"{url}?{over}", headers={}, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        await http.post(url + query, headers={}, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        assert len(set(_PEERS)) == 2  # the body left unread took its connection with it
        connector = http.session().connector
        assert connector is not None and not connector._acquired  # nothing held after any of them
    finally:
        await http.aclose()


async def test_a_try_in_time_leaves_nothing_armed(url: str) -> None:
    """A post and a stream answered in time leave no bound armed: idle past them all, their connection serves again."""
    http = HttpClient()
    try:
        bounds = Timeouts(connect=1.0, first_token=0.2, idle=0.2, total=0.4)
        credential = http.credential({"Content-Type": "application/json"})
        resp = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        assert resp.status == 200 and resp.body == b'{"ok": true}'
        # a body of many reads: the idle bound is on from its first byte to its last
        async with http.stream(
            url + "?chunked&size=300000", headers={}, body=b"{}", timeouts=bounds, callee=CALLEE
        ) as s:
            assert len(b"".join([c async for c in s.chunks()])) == 300000
        await asyncio.sleep(0.5)
        resp = await http.post(url, headers={}, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        assert resp.status == 200 and resp.body == b'{"ok": true}'
        assert len(set(_PEERS)) == 1  # every request reused the first connection
    finally:
        await http.aclose()


async def test_a_credential_sends_again_after_the_client_closed(url: str) -> None:
    """Closing the client closes a credential's session; the next request with it makes a new one."""
    http = HttpClient()
    bounds = Timeouts(connect=1.0, first_token=5.0, idle=5.0, total=10.0)
    credential = http.credential({"Content-Type": "application/json"})
    try:
        first = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        closed = credential.session
        await http.aclose()
        assert closed is not None and closed.closed and credential.session is None
        again = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, callee=CALLEE, max_bytes=100)
        assert first.body == again.body == b'{"ok": true}'
        assert credential.session is not None and not credential.session.closed
    finally:
        await http.aclose()


async def test_a_calls_callee_is_its_models_on_every_call(http: HttpClient) -> None:
    """The callee a call's or stream's transport names (cached, else made) is its own model's, every time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    adapter = make_adapter(http, "openai", f"http://127.0.0.1:{port}/v1")

    async def drain(model: str) -> None:
        async for _ in adapter.stream(ChatRequest.of("hi"), model):
            pass

    for model in ("m-a", "m-b", "m-a", "m-b"):
        with pytest.raises(ProviderConnectionError) as info:
            await adapter.chat(ChatRequest.of("hi"), model)
        assert (info.value.provider, info.value.model) == ("openai.test", model)
        with pytest.raises(ProviderConnectionError) as info:
            await drain(model)
        assert (info.value.provider, info.value.model) == ("openai.test", model)
        assert adapter._callees[model] is adapter.callee(model)
        assert adapter.callee(model) == Callee(profile="openai.test", model=model, secrets=adapter._secrets)
