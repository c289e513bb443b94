"""The response size bound counts decoded bytes: a compressed body or stream cannot inflate past it."""

from __future__ import annotations

import gc
import tracemalloc
import zlib
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from servers import loopback_app
from turnout import Client
from turnout.core.errors import AllProvidersFailed, ErrorClass, ProtocolError, ResponseTooLarge
from turnout.providers.http import Callee, HttpClient, Timeouts

CALLEE = Callee(profile="test.http", model="m-1")
INFLATED = 64 * 1024 * 1024  # what the bomb inflates to
LIMIT = 64 * 1024


def gzip_of(pieces: int, piece: bytes) -> bytes:
    """``piece`` repeated ``pieces`` times, gzip-encoded, compressed piece by piece (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [packer.compress(piece) for _ in range(pieces)]
    out.append(packer.flush())
    return b"".join(out)


BOMB = gzip_of(INFLATED // (1024 * 1024), b" " * (1024 * 1024))
CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
STREAM_BOMB = gzip_of(INFLATED // len(CHUNK), CHUNK)


class Bombs:
    """A loopback server answering every POST with a gzip bomb: a whole JSON body, or an SSE stream."""

    def __init__(self) -> None:
        self.fetches: dict[str, int] = {"whole": 0, "stream": 0}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        streaming = b'"stream":true' in body.replace(b" ", b"")
        self.fetches["stream" if streaming else "whole"] += 1
        if streaming:
            return web.Response(
                body=STREAM_BOMB, headers={"Content-Encoding": "gzip", "Content-Type": "text/event-stream"}
            )
        return web.Response(body=BOMB, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})


@pytest.fixture
async def bombs() -> AsyncIterator[tuple[Bombs, str]]:
    server = Bombs()
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    async with loopback_app(app) as url:
        yield server, url


def bounds() -> Timeouts:
    return Timeouts(connect=5.0, first_token=10.0, idle=10.0, total=30.0)


async def test_a_gzip_bomb_is_a_protocol_error_and_is_never_inflated_whole(bombs: tuple[Bombs, str]) -> None:
    """A 64 KiB bound, a body whose compressed length fits and inflates to 64 MiB: ResponseTooLarge, memory bounded."""
    _, url = bombs
    assert len(BOMB) < LIMIT  # the compressed Content-Length alone says the body fits
    http = HttpClient()
    try:
        gc.collect()
        tracemalloc.start()
        try:
            with pytest.raises(ResponseTooLarge) as info:
                await http.post(
                    url + "/v1/x", headers={}, body=b"{}", timeouts=bounds(), callee=CALLEE, max_bytes=LIMIT
                )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await http.aclose()
    assert isinstance(info.value, ProtocolError) and info.value.error_class is ErrorClass.RETRYABLE
    assert "once decoded" in str(info.value)
    assert peak < INFLATED // 16  # far less than the inflated size was ever held


async def test_a_compressed_body_within_the_bound_is_read_whole() -> None:
    """The bound applies to decoded bytes: a compressed body whose decoded size fits is read whole."""
    small = gzip_of(1, b'{"ok": true}')

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(body=small, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    app = web.Application()
    app.router.add_post("/", handle)
    http = HttpClient()
    try:
        async with loopback_app(app) as url:
            resp = await http.post(url + "/", headers={}, body=b"{}", timeouts=bounds(), callee=CALLEE, max_bytes=1024)
            assert orjson.loads(resp.body) == {"ok": True}
    finally:
        await http.aclose()


async def test_a_compressed_stream_is_bounded_in_total_once_decoded(bombs: tuple[Bombs, str]) -> None:
    """A gzip SSE stream of small events inflating past the bound fails with ResponseTooLarge, memory bounded."""
    _, url = bombs
    http = HttpClient()
    read = [0]

    async def drain() -> None:
        async with http.stream(
            url + "/v1/x", headers={}, body=b'{"stream": true}', timeouts=bounds(), callee=CALLEE, max_bytes=LIMIT
        ) as resp:
            async for chunk in resp.chunks():
                read[0] += len(chunk)

    try:
        with pytest.raises(ResponseTooLarge):
            await drain()
    finally:
        await http.aclose()
    assert read[0] <= LIMIT  # what reached the reader stayed within the bound


def bomb_config(url: str) -> dict[str, object]:
    profile = {"uri": url + "/v1", "api_key": "sk-test-0000", "model": "m", "max_response_bytes": LIMIT}
    return {
        "default_provider": "openai.only",
        "providers": {"models": {"openai": {"only": profile}}},
        "reliability": {"provider_retries": 2, "provider_backoff_ms": 50},
        "ledger": {"enabled": False},
    }


async def test_a_bomb_is_fetched_once_per_call_and_never_replayed_on_its_entry(bombs: tuple[Bombs, str]) -> None:
    """A stream that fails on the bound is not retried on its entry, nor recovered there: one fetch, not four."""
    server, url = bombs
    async with Client.from_dict(bomb_config(url), ledger=False) as client:
        with pytest.raises(Exception) as streamed:
            async for _ in client.stream("hi"):
                pass
        with pytest.raises(AllProvidersFailed) as whole:
            await client.chat("hi")
    assert server.fetches == {"stream": 1, "whole": 1}
    assert isinstance(streamed.value, ResponseTooLarge | AllProvidersFailed)
    assert [a.outcome for a in whole.value.attempts] == ["retryable"]
