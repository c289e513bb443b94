"""Each time bound of an attempt ends it when it passes, and is named: posts and streams alike."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from servers import loopback_app
from turnout.core.errors import ProviderTimeout
from turnout.providers.http import Callee, HttpClient, Timeouts

CALLEE = Callee(profile="test.http", model="m-1")


async def _post(http: HttpClient, url: str, timeouts: Timeouts) -> bytes:
    resp = await http.post(url, headers={}, body=b"{}", timeouts=timeouts, callee=CALLEE, max_bytes=100_000)
    return resp.body


async def _read_all(http: HttpClient, url: str, timeouts: Timeouts) -> bytes:
    async with http.stream(url, headers={}, body=b"{}", timeouts=timeouts, callee=CALLEE) as resp:
        return b"".join([c async for c in resp.chunks()])


_SENDS = pytest.mark.parametrize("send", [_post, _read_all], ids=["post", "stream"])


@pytest.fixture
async def base() -> AsyncIterator[str]:
    """A loopback server whose answers open and then keep their bytes back (``?first=``, ``?gap=`` seconds)."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        """Headers at once; then the body's pieces, the first after ``first`` seconds, each next ``gap`` later."""
        await request.read()
        first, gap = float(request.query.get("first", "0")), float(request.query.get("gap", "0"))
        pieces = int(request.query.get("pieces", "3"))
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            for i in range(pieces):
                if await _released(release, first if i == 0 else gap):
                    return resp
                await resp.write(b"piece,")
            await resp.write_eof()
        except ConnectionError:
            pass  # the client gave up on it
        return resp

    app = web.Application()
    app.router.add_post("/slow", slow)
    async with loopback_app(app, access_log=None) as url:
        yield url + "/slow"
        release.set()


async def _released(release: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``; whether the test ended meanwhile."""
    try:
        await asyncio.wait_for(release.wait(), seconds)
    except TimeoutError:
        return False
    return True


@pytest.fixture
def unanswered() -> Iterator[str]:
    """A URL whose connection never opens: a listener whose backlog is full drops the connecting handshake."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    yield f"http://127.0.0.1:{port}/"
    for sock in (*fillers, listener):
        sock.close()


async def _timed_out(send: Any, http: HttpClient, url: str, timeouts: Timeouts) -> tuple[ProviderTimeout, float]:
    """The timeout a request ended with, and how long it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ProviderTimeout) as info:
        await send(http, url, timeouts)
    return info.value, loop.time() - start


@_SENDS
async def test_a_connection_that_does_not_open_is_a_connect_timeout(
    http: HttpClient, unanswered: str, send: Any
) -> None:
    """The connect bound ends an attempt whose connection does not open, naming the endpoint."""
    bounds = Timeouts(connect=0.3, first_token=5.0, idle=5.0, total=10.0)
    error, elapsed = await _timed_out(send, http, unanswered, bounds)
    assert (error.phase, error.seconds, error.address) == ("connect", 0.3, unanswered[7:-1])
    assert 0.3 <= elapsed < 0.6


@_SENDS
@pytest.mark.parametrize(
    ("bounds", "phase"),
    [
        (Timeouts(connect=0.3, first_token=5.0, idle=5.0, total=0.3), "total"),
        (Timeouts(connect=5.0, first_token=0.3, idle=5.0, total=10.0), "first_token"),
    ],
    ids=["total", "first_token"],
)
async def test_the_bounds_from_the_start_count_the_connect_time(
    http: HttpClient, unanswered: str, send: Any, bounds: Timeouts, phase: str
) -> None:
    """The first-token and total bounds run from the start of the attempt: a connection still opening counts."""
    error, elapsed = await _timed_out(send, http, unanswered, bounds)
    assert (error.phase, error.seconds) == (phase, 0.3)
    assert 0.3 <= elapsed < 0.6


@_SENDS
async def test_a_first_body_byte_later_than_the_first_token_bound_is_a_first_token_timeout(
    http: HttpClient, base: str, send: Any
) -> None:
    """Headers in time do not end the first-token bound: the first body byte must come within it too."""
    bounds = Timeouts(connect=1.0, first_token=0.3, idle=0.1, total=10.0)
    error, elapsed = await _timed_out(send, http, base + "?first=5", bounds)
    assert (error.phase, error.seconds) == ("first_token", 0.3)
    assert 0.3 <= elapsed < 0.6


@_SENDS
async def test_the_first_body_byte_ends_the_first_token_bound(http: HttpClient, base: str, send: Any) -> None:
    """From the first body byte on, the idle bound applies, not the first-token one: a body within it completes."""
    bounds = Timeouts(connect=1.0, first_token=0.3, idle=0.4, total=10.0)
    assert await send(http, base + "?first=0.2&gap=0.25", bounds) == b"piece," * 3


@_SENDS
async def test_a_body_that_pauses_longer_than_the_idle_bound_is_an_idle_timeout(
    http: HttpClient, base: str, send: Any
) -> None:
    """Silence between body bytes longer than the idle bound ends the attempt, whatever the first-token bound."""
    bounds = Timeouts(connect=1.0, first_token=5.0, idle=0.2, total=10.0)
    error, elapsed = await _timed_out(send, http, base + "?gap=5", bounds)
    assert (error.phase, error.seconds) == ("idle", 0.2)
    assert 0.2 <= elapsed < 0.5


@_SENDS
async def test_a_body_still_coming_at_the_total_bound_is_a_total_timeout(
    http: HttpClient, base: str, send: Any
) -> None:
    """Bytes that keep coming within the idle bound do not extend the attempt past its total bound."""
    bounds = Timeouts(connect=1.0, first_token=0.2, idle=0.2, total=0.5)
    error, elapsed = await _timed_out(send, http, base + "?gap=0.05&pieces=100", bounds)
    assert (error.phase, error.seconds) == ("total", 0.5)
    assert 0.5 <= elapsed < 0.7


async def test_silence_while_the_consumer_is_busy_is_an_idle_timeout(http: HttpClient, base: str) -> None:
    """The idle bound measures the connection, not the reader: silence while the consumer was busy ends the stream."""
    bounds = Timeouts(connect=1.0, first_token=5.0, idle=0.2, total=10.0)
    async with http.stream(base + "?gap=5", headers={}, body=b"{}", timeouts=bounds, callee=CALLEE) as resp:
        assert await resp.read_chunk() == b"piece,"
        await asyncio.sleep(0.4)  # busy elsewhere for longer than the idle bound
        with pytest.raises(ProviderTimeout) as info:
            await resp.read_chunk()
    assert (info.value.phase, info.value.seconds) == ("idle", 0.2)
