"""The shared HTTP transport: typed connection errors, time bounds, size bounds and connection release."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from provider_kit import RecordingServer, make_adapter
from provider_kit import Reply as Answer

from servers import loopback_app
from turnout.core.errors import ErrorClass, ProtocolError, ProviderConnectionError, ProviderTimeout
from turnout.core.types import ChatRequest
from turnout.providers.http import Callee, HttpClient, Timeouts

CALLEE = Callee(profile="test.http", model="m-1")
BIG = b"x" * 5000


@dataclass
class Lab:
    """A loopback aiohttp server with one route per transport behaviour, plus raw socket servers."""

    url: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    peer_ports: list[int] = field(default_factory=list)
    raw_writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def _peer(self, request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.peer_ports.append(peer[1] if peer else -1)

    async def ok(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self._peer(request)
        return web.Response(body=b'{"ok": true}', content_type="application/json")

    async def headers(self, request: web.Request) -> web.StreamResponse:
        """The request's headers, as a JSON object (names lowercased; transport headers left out)."""
        await request.read()
        self._peer(request)
        skip = {"host", "content-length", "accept", "accept-encoding"}
        seen = {k.lower(): v for k, v in request.headers.items() if k.lower() not in skip}
        return web.json_response(seen)

    async def chunks(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self._peer(request)
        resp = web.StreamResponse()
        await resp.prepare(request)
        for piece in (b"one,", b"two,", b"three"):
            await resp.write(piece)
        await resp.write_eof()
        return resp

    async def stall(self, request: web.Request) -> web.StreamResponse:
        """Headers and a first piece, then silence until the test ends."""
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"first piece")
        await self.release.wait()
        return resp

    async def drip(self, request: web.Request) -> web.StreamResponse:
        """A byte every 50 ms, never ending: only the total bound can stop it."""
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        while not self.release.is_set():
            try:
                await resp.write(b".")
            except ConnectionError:
                break
            await asyncio.sleep(0.05)
        return resp

    async def endless(self, request: web.Request) -> web.StreamResponse:
        """Writes until the client goes away, then records the disconnect."""
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            while not self.release.is_set():
                await resp.write(b"data: tick\n\n")
                await asyncio.sleep(0.01)
        except ConnectionError:
            self.disconnected.set()
        return resp

    async def big_length(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(body=BIG)

    async def big_chunked(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(BIG), 1000):
            await resp.write(BIG[i : i + 1000])
        await resp.write_eof()
        return resp

    async def cut(self, request: web.Request) -> web.StreamResponse:
        """A chunked body whose connection is closed before the terminating chunk."""
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"partial")
        assert request.transport is not None
        request.transport.close()
        return resp

    async def raw_reset(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads the request line and closes the socket without a response."""
        await reader.readline()
        writer.close()

    async def raw_silent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Accepts the request and never answers."""
        self.raw_writers.append(writer)
        await reader.readline()
        await self.release.wait()
        writer.close()


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    """The behaviour server, released and shut down after the test."""
    lab = Lab()
    app = web.Application()
    for path, handler in (
        ("/ok", lab.ok),
        ("/chunks", lab.chunks),
        ("/headers", lab.headers),
        ("/stall", lab.stall),
        ("/drip", lab.drip),
        ("/endless", lab.endless),
        ("/big-length", lab.big_length),
        ("/big-chunked", lab.big_chunked),
        ("/cut", lab.cut),
    ):
        app.router.add_post(path, handler)
    async with loopback_app(app, access_log=None) as lab.url:
        yield lab
        lab.release.set()
        for w in lab.raw_writers:
            w.close()


@pytest.fixture
async def raw_server(lab: Lab) -> AsyncIterator[dict[str, str]]:
    """Raw TCP servers that reset or stay silent (below HTTP)."""
    reset = await asyncio.start_server(lab.raw_reset, "127.0.0.1", 0)
    silent = await asyncio.start_server(lab.raw_silent, "127.0.0.1", 0)
    urls = {
        "reset": f"http://127.0.0.1:{reset.sockets[0].getsockname()[1]}/",
        "silent": f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}/",
    }
    yield urls
    lab.release.set()
    for w in lab.raw_writers:
        w.close()
    for srv in (reset, silent):
        srv.close()
        await srv.wait_closed()


def _bounds(first: float = 5.0, idle: float = 5.0, total: float = 10.0) -> Timeouts:
    return Timeouts(connect=1.0, first_token=first, idle=idle, total=total)


async def _read_all(http: HttpClient, url: str, timeouts: Timeouts) -> bytes:
    async with http.stream(url, headers={}, body=b"{}", timeouts=timeouts, callee=CALLEE) as resp:
        return b"".join([c async for c in resp.chunks()])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connect_refused(http: HttpClient) -> None:
    """Nothing listening: a retryable ProviderConnectionError naming the callee."""
    with pytest.raises(ProviderConnectionError) as info:
        await _read_all(http, f"http://127.0.0.1:{_free_port()}/", _bounds())
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert info.value.provider == "test.http" and info.value.model == "m-1"


async def _post(http: HttpClient, url: str, timeouts: Timeouts) -> bytes:
    return (await http.post(url, headers={}, body=b"{}", timeouts=timeouts, callee=CALLEE, max_bytes=1000)).body


_SENDS = pytest.mark.parametrize("send", [_post, _read_all], ids=["post", "stream"])


@_SENDS
async def test_failures_before_the_headers_keep_their_cause(
    http: HttpClient, raw_server: dict[str, str], send: Any
) -> None:
    """A refused connection is the cause of its ProviderConnectionError; our own deadline is no one's cause."""
    with pytest.raises(ProviderConnectionError) as refused:
        await send(http, f"http://127.0.0.1:{_free_port()}/", _bounds())
    assert isinstance(refused.value.__cause__, aiohttp.ClientError)
    with pytest.raises(ProviderTimeout) as timed_out:
        await send(http, raw_server["silent"], _bounds(first=0.1))
    assert timed_out.value.phase == "first_token"
    assert timed_out.value.__cause__ is None and timed_out.value.__suppress_context__


@_SENDS
async def test_a_callers_cancellation_before_the_headers_stays_a_cancellation(
    http: HttpClient, raw_server: dict[str, str], send: Any
) -> None:
    """Cancelling the caller while it waits for headers raises CancelledError, not a timeout."""
    task = asyncio.ensure_future(send(http, raw_server["silent"], _bounds(first=5.0)))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_reset_before_headers(http: HttpClient, raw_server: dict[str, str]) -> None:
    """The server closes the socket before any response: ProviderConnectionError."""
    with pytest.raises(ProviderConnectionError):
        await http.post(raw_server["reset"], headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=100)


async def test_silent_server_hits_first_token_bound(http: HttpClient, raw_server: dict[str, str]) -> None:
    """A server that never sends headers fails with ProviderTimeout(first_token) within the bound."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ProviderTimeout) as info:
        await _read_all(http, raw_server["silent"], _bounds(first=0.3))
    elapsed = loop.time() - start
    assert info.value.phase == "first_token"
    assert info.value.error_class is ErrorClass.TIMEOUT
    assert 0.3 <= elapsed < 0.45


async def test_silent_server_hits_total_bound_first_when_shorter(http: HttpClient, raw_server: dict[str, str]) -> None:
    """When the total bound is the shorter one, waiting for headers fails with phase ``total``."""
    with pytest.raises(ProviderTimeout) as info:
        await _read_all(http, raw_server["silent"], _bounds(first=5.0, total=0.25))
    assert info.value.phase == "total"


async def test_stall_mid_body_hits_idle_bound(http: HttpClient, lab: Lab) -> None:
    """Headers and a first piece, then silence: ProviderTimeout(idle) within ~1.3x the idle bound.

    The first-token bound is long on purpose: the idle bound must apply as soon as bytes flowed.
    """
    loop = asyncio.get_running_loop()
    idle = 0.3
    got: list[bytes] = []
    async with http.stream(
        lab.url + "/stall", headers={}, body=b"{}", timeouts=_bounds(first=5.0, idle=idle), callee=CALLEE
    ) as resp:
        chunks = resp.chunks()
        got.append(await anext(chunks))
        start = loop.time()
        with pytest.raises(ProviderTimeout) as info:
            await anext(chunks)
        elapsed = loop.time() - start
    assert got == [b"first piece"]
    assert info.value.phase == "idle"
    assert info.value.seconds == idle
    assert elapsed < idle * 1.3 + 0.05


async def test_steady_drip_hits_total_bound(http: HttpClient, lab: Lab) -> None:
    """Bytes keep flowing, so only the total bound stops the attempt: ProviderTimeout(total)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ProviderTimeout) as info:
        await _read_all(http, lab.url + "/drip", _bounds(first=0.3, idle=0.3, total=0.5))
    elapsed = loop.time() - start
    assert info.value.phase == "total"
    assert info.value.seconds == 0.5  # the bound, not the loop time it ended at
    assert 0.5 <= elapsed < 0.7


@pytest.mark.parametrize("path", ["/big-length", "/big-chunked"], ids=["content-length", "chunked"])
async def test_body_over_max_bytes_is_protocol_error(http: HttpClient, lab: Lab, path: str) -> None:
    """A body larger than ``max_bytes`` is a ProtocolError, with or without Content-Length."""
    with pytest.raises(ProtocolError) as info:
        await http.post(lab.url + path, headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=1000)
    assert "1000" in str(info.value)
    resp = await http.post(lab.url + path, headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=5000)
    assert resp.body == BIG


async def test_connection_closed_mid_body(http: HttpClient, lab: Lab) -> None:
    """A chunked body cut by the server is a ProviderConnectionError, not a short success."""
    with pytest.raises(ProviderConnectionError):
        await _read_all(http, lab.url + "/cut", _bounds())


async def test_leaving_the_stream_early_closes_the_connection(http: HttpClient, lab: Lab) -> None:
    """A consumer that stops reading closes the connection: the server sees the client go."""
    async with http.stream(lab.url + "/endless", headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE) as resp:
        async for chunk in resp.chunks():
            assert chunk.startswith(b"data: tick")
            break
    await asyncio.wait_for(lab.disconnected.wait(), timeout=2.0)
    # the closed connection is not handed out again
    await http.post(lab.url + "/ok", headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=100)
    await http.post(lab.url + "/ok", headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=100)
    assert lab.peer_ports[0] == lab.peer_ports[1]


async def test_stream_read_to_end_releases_connection_for_reuse(http: HttpClient, lab: Lab) -> None:
    """A stream read to its end returns its connection to the pool: the next request reuses it."""
    assert await _read_all(http, lab.url + "/chunks", _bounds()) == b"one,two,three"
    assert await _read_all(http, lab.url + "/chunks", _bounds()) == b"one,two,three"
    resp = await http.post(lab.url + "/ok", headers={}, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=100)
    assert resp.status == 200 and resp.body == b'{"ok": true}'
    assert len(set(lab.peer_ports)) == 1


async def test_slow_consumer_after_complete_body_is_not_timed_out(http: HttpClient, lab: Lab) -> None:
    """Once the whole body arrived, a consumer slower than the idle bound still reads it to the end."""
    async with http.stream(
        lab.url + "/chunks", headers={}, body=b"{}", timeouts=_bounds(first=0.1, idle=0.1, total=5.0), callee=CALLEE
    ) as resp:
        await resp._resp.content.wait_eof()
        # the consumer is busy elsewhere for longer than the idle bound (a timer, not a wait for the server)
        await asyncio.sleep(0.3)
        body = b"".join([c async for c in resp.chunks()])
    assert body == b"one,two,three"


async def test_profile_bounds_one_stream_line(server: RecordingServer, http: HttpClient) -> None:
    """A stream line longer than the profile's max_response_bytes is a ProtocolError, not a memory sink."""
    server.reply(Answer(headers={"Content-Type": "text/event-stream"}, pieces=[b"data: " + b"x" * 5000]))
    adapter = make_adapter(http, "openai", server.url, max_response_bytes=2048)

    async def drain() -> None:
        async for _ in adapter.stream(ChatRequest.of("hi"), "m"):
            pass

    with pytest.raises(ProtocolError, match=r"longer than 2048|exceeds the response limit"):  # the line, or the total
        await drain()


async def test_a_credential_sends_exactly_what_the_same_plain_headers_send(http: HttpClient, lab: Lab) -> None:
    """A credential's own session sends the same headers a plain mapping would, on the shared connection pool."""
    fixed = {"Content-Type": "application/json", "Authorization": "Bearer sk-one", "x-team": "search"}
    credential = http.credential(fixed)
    other = http.credential({**fixed, "Authorization": "Bearer sk-two"})

    async def seen(headers: dict[str, str]) -> Any:
        resp = await http.post(
            lab.url + "/headers", headers=headers, body=b"{}", timeouts=_bounds(), callee=CALLEE, max_bytes=5000
        )
        return orjson.loads(resp.body)

    plain = await seen(dict(fixed))
    assert (
        await seen(credential)
        == plain
        == {k.lower(): v for k, v in fixed.items()} | {"user-agent": plain["user-agent"]}
    )
    assert (await seen(other))["authorization"] == "Bearer sk-two"
    assert (await seen(credential))["authorization"] == "Bearer sk-one"  # each credential keeps its own
    assert len(set(lab.peer_ports)) == 1  # one pool: every request reused the first connection
