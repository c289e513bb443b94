"""The per-attempt watchdog's fast start held to the plain rules of its bounds, and what an attempt leaves behind."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_kit import make_adapter

from servers import loopback_app
from turnout.errors import ProtocolError, ProviderConnectionError, ProviderTimeout
from turnout.providers.http import HttpClient, Target, Timeouts, _Deadlines, _Watchdog
from turnout.types import ChatRequest

TARGET = Target(provider="test.http", model="m-1")


@dataclass
class _Content:
    """A body reader's byte counter and end, as the watchdog reads them."""

    total_raw_bytes: int = 0
    eof: bool = False
    error: BaseException | None = None

    def is_eof(self) -> bool:
        return self.eof

    def set_exception(self, exc: BaseException) -> None:
        self.error = exc


@dataclass
class _Task:
    """A task that counts its cancellations."""

    cancelled: int = 0

    def cancel(self) -> bool:
        self.cancelled += 1
        return True


@dataclass
class _Reference:
    """The bounds as SPEC 7.3 states them, every deadline worked out up front (the watchdog's general form)."""

    start: float
    timeouts: Timeouts
    content: _Content | None = None
    seen: int = -1
    last: float = 0.0
    outcome: list[tuple[str, float | None]] = field(default_factory=list)

    @property
    def step(self) -> float:
        return max(self.timeouts.idle / 4, 0.01)

    @property
    def first(self) -> float:
        return self.start + self.timeouts.first_token

    @property
    def total(self) -> float:
        return self.start + self.timeouts.total

    def due(self, now: float) -> float:
        if self.seen <= 0:
            return min(now + self.step, self.first, self.total)
        return min(now + self.step, self.last + self.timeouts.idle, self.total)

    def check(self, now: float) -> float | None:
        content = self.content
        if content is None:
            if now >= self.total or now >= self.first:
                self.outcome.append(("first_token" if self.first <= self.total else "total", None))
                return None
            return self.due(now)
        if content.is_eof():
            return None
        seen = content.total_raw_bytes
        if seen != self.seen and seen > 0:
            self.seen, self.last = seen, now
        if now >= self.total:
            self.outcome.append(("total", self.timeouts.total))
        elif self.seen <= 0 and now >= self.first:
            self.outcome.append(("first_token", None))
        elif self.seen > 0 and now - self.last >= self.timeouts.idle:
            self.outcome.append(("idle", self.timeouts.idle))
        else:
            return self.due(now)
        return None


_SECONDS = st.floats(min_value=0.001, max_value=200.0, allow_nan=False)
_STEPS = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=60.0, allow_nan=False), st.integers(0, 3), st.booleans()),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    first=_SECONDS,
    idle=_SECONDS,
    total=_SECONDS,
    start=st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    headers_after=st.integers(0, 12),
    steps=_STEPS,
)
def test_the_watchdog_keeps_every_bound_as_stated(
    first: float, idle: float, total: float, start: float, headers_after: int, steps: list[tuple[float, int, bool]]
) -> None:
    """Made in one call and checked from its start, a watchdog fires, waits and schedules as the stated bounds do."""
    timeouts = Timeouts(connect=1.0, first_token=first, idle=idle, total=total)
    deadlines = _Deadlines(None)
    deadlines._when = -math.inf  # nothing to arm: the watchdog is checked by hand here
    task = _Task()
    watchdog = _Watchdog(deadlines, task, start, timeouts, TARGET)  # type: ignore[arg-type]
    reference = _Reference(start, timeouts)
    assert list(deadlines._watched) == [watchdog]
    # the first due, worked out once per profile, is the one the stated rule gives at the start
    assert start + timeouts.first_check == reference.due(start) == watchdog.due(start)
    now = start
    content = _Content()
    for index, (gap, grown, eof) in enumerate(steps):
        if index == headers_after:
            watchdog._content = reference.content = content  # type: ignore[assignment]
        now += gap
        if reference.content is not None:
            content.total_raw_bytes += grown
            content.eof = content.eof or (eof and index % 3 == 0)
        expected = reference.check(now)
        assert watchdog.check(now) == expected
        if expected is None:
            break
    if reference.outcome and reference.content is None:
        assert (watchdog.fired, task.cancelled) == (reference.outcome[0][0], 1)
    else:
        assert not hasattr(watchdog, "fired") and task.cancelled == 0
    if reference.outcome and reference.content is not None:
        assert isinstance(content.error, ProviderTimeout)
        assert (content.error.phase, content.error.seconds) == reference.outcome[0]
    else:
        assert content.error is None


def test_the_deadlines_read_the_loops_own_clock() -> None:
    """The standard event loop is read through ``time.monotonic`` directly; a loop with a clock of its own keeps it."""

    class Shifted(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return 1e9 + time.monotonic()

    plain, shifted = asyncio.new_event_loop(), Shifted()
    try:
        assert _Deadlines(plain).clock is time.monotonic
        before = plain.time()
        assert before <= _Deadlines(plain).clock() <= plain.time()
        assert _Deadlines(shifted).clock() > 1e9
        assert _Deadlines(None).clock is time.monotonic
    finally:
        plain.close()
        shifted.close()


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
            resp = await http.post(url + query, headers={}, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
            assert resp.body == b'{"ok": true}' and resp.status in (200, 429)
        assert len(set(_PEERS)) == 1  # every post reused the first connection
        # larger than the socket buffers: still arriving when the bound stops reading it
        over = "&".join(part for part in (query.lstrip("?"), "size=8000000") if part)
        with pytest.raises(ProtocolError):
            await http.post(f"{url}?{over}", headers={}, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
        await http.post(url + query, headers={}, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
        assert len(set(_PEERS)) == 2  # the body left unread took its connection with it
        connector = http.session().connector
        assert connector is not None and not connector._acquired  # nothing held after any of them
    finally:
        await http.aclose()


async def test_a_try_in_time_leaves_nothing_watched(url: str) -> None:
    """A post and a stream answered in time leave no attempt watched, and one timer armed for the loop."""
    http = HttpClient()
    try:
        bounds = Timeouts(connect=1.0, first_token=5.0, idle=5.0, total=10.0)
        credential = http.credential({"Content-Type": "application/json"})
        resp = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
        assert resp.status == 200 and resp.body == b'{"ok": true}'
        async with http.stream(url, headers={}, body=b"{}", timeouts=bounds, target=TARGET) as stream:
            assert http._deadlines._watched
            assert b"".join([c async for c in stream.chunks()]) == b'{"ok": true}'
        assert http._deadlines._loop is asyncio.get_running_loop()
        assert not http._deadlines._watched and http._deadlines._handle is not None
    finally:
        await http.aclose()


async def test_a_credential_sends_again_after_the_client_closed(url: str) -> None:
    """Closing the client closes a credential's session; the next request with it makes a new one."""
    http = HttpClient()
    bounds = Timeouts(connect=1.0, first_token=5.0, idle=5.0, total=10.0)
    credential = http.credential({"Content-Type": "application/json"})
    try:
        first = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
        closed = credential.session
        await http.aclose()
        assert closed is not None and closed.closed and credential.session is None
        again = await http.post(url, headers=credential, body=b"{}", timeouts=bounds, target=TARGET, max_bytes=100)
        assert first.body == again.body == b'{"ok": true}'
        assert credential.session is not None and not credential.session.closed
    finally:
        await http.aclose()


async def test_a_calls_target_is_its_models_on_every_call(http: HttpClient) -> None:
    """The target a call's or stream's transport names (cached, else made) is its own model's, every time."""
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
        assert adapter._targets[model] is adapter.target(model)
        assert adapter.target(model) == Target(provider="openai.test", model=model, secrets=adapter._secrets)
