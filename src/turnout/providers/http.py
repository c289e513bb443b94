"""The HTTP transport every adapter shares: one aiohttp session, time bounds, size bounds, typed errors.

Time bounds per attempt (SPEC 7.3): ``connect`` (opening the connection), ``first_token`` (from sending
the request to the response headers and, for a stream, its first body byte), ``idle`` (silence between
body bytes) and ``total`` (the whole attempt). Body bytes are watched by a lazy watchdog that reads the
connection's byte counter a few times per idle period, so reading a chunk costs nothing extra.

Every aiohttp and socket exception is translated here, at one boundary, into a
:class:`~turnout.errors.ProviderError` subclass (``raise ... from exc``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from turnout._fast import fast_init
from turnout.config.secrets import scrub
from turnout.errors import ProtocolError, ProviderConnectionError, ProviderError, ProviderTimeout

USER_AGENT = "turnout/0.1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Time bounds of one attempt, in seconds."""

    connect: float = 10.0
    first_token: float = 60.0
    idle: float = 60.0
    total: float = 120.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Who is being called, for error messages, and the secrets to scrub from them."""

    provider: str
    model: str | None
    secrets: tuple[str, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete (non-streaming) response."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


class _Watchdog:
    """One timer per attempt: bounds the wait for the response headers, then the body's bytes.

    Before the headers it cancels the waiting task at the first-token (or total) deadline; the caller turns
    that cancellation into :class:`ProviderTimeout`. Once the body is attached, instead of re-arming a timer
    on every chunk, it checks the connection's byte counter a few times per idle period and injects a
    :class:`ProviderTimeout` into the body reader when a bound has passed.
    """

    __slots__ = (
        "_content",
        "_first",
        "_handle",
        "_idle",
        "_last",
        "_loop",
        "_seen",
        "_target",
        "_task",
        "_total",
        "fired",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        task: asyncio.Task[Any],
        *,
        first_deadline: float,
        idle: float,
        total_deadline: float,
        target: Target,
    ) -> None:
        self._loop = loop
        self._task = task
        self._content: aiohttp.StreamReader | None = None
        self._first = first_deadline
        self._idle = idle
        self._total = total_deadline
        self._target = target
        self._seen = -1
        self._last = loop.time()
        self._handle: asyncio.TimerHandle | None = None
        self.fired: str | None = None  # the phase whose bound ended the header wait
        self._arm(self._last)

    def attach(self, content: aiohttp.StreamReader) -> None:
        """The headers arrived: watch the body from now on (the pending timer carries over)."""
        self._content = content
        self._last = self._loop.time()

    def _arm(self, now: float) -> None:
        # Poll before the first byte too: the idle bound must start as soon as bytes flow, not at the
        # first-token deadline.
        step = max(self._idle / 4, 0.01)
        if self._seen <= 0:
            due = min(now + step, self._first, self._total)
        else:
            due = min(now + step, self._last + self._idle, self._total)
        self._handle = self._loop.call_at(max(due, now + 0.001), self._check)

    def _check(self) -> None:
        now = self._loop.time()
        content = self._content
        if content is None:  # still waiting for the headers
            if now >= self._total or now >= self._first:
                self._handle = None
                self.fired = "first_token" if self._first <= self._total else "total"
                self._task.cancel()
                return None
            self._arm(now)
            return None
        if content.is_eof():
            # The whole body arrived: a consumer slower than the bounds must still read it.
            self._handle = None
            return None
        seen = content.total_raw_bytes
        if seen != self._seen and seen > 0:
            self._seen = seen
            self._last = now
        if now >= self._total:
            return self._fire("total", self._total)
        if self._seen <= 0 and now >= self._first:
            return self._fire("first_token", None)
        if self._seen > 0 and now - self._last >= self._idle:
            return self._fire("idle", self._idle)
        self._arm(now)
        return None

    def _fire(self, phase: str, seconds: float | None) -> None:
        self._handle = None
        what = {"total": "the attempt's total time", "first_token": "the first token", "idle": "more stream data"}
        exc = ProviderTimeout(
            f"timed out waiting for {what[phase]}",
            phase=phase,
            seconds=seconds,
            provider=self._target.provider,
            model=self._target.model,
        )
        assert self._content is not None
        self._content.set_exception(exc)

    def cancel(self) -> None:
        """Stop the timer."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class StreamingResponse:
    """An open streaming response. Iterate :meth:`chunks`; the context manager closes it."""

    __slots__ = ("_resp", "_watchdog", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog) -> None:
        self._resp = resp
        self._watchdog = watchdog
        self.status = resp.status
        self.headers = resp.headers

    async def read_chunk(self) -> bytes:
        """The body bytes that arrived since the last read (waiting for some); ``b""`` at the end of the body.

        Raises:
            ProviderTimeout: A time bound passed.
            ProviderConnectionError: The connection was lost.
        """
        try:
            return await self._resp.content.readany()
        except ProviderError:
            raise
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderConnectionError(
                f"connection lost while streaming: {type(exc).__name__}",
                provider=self._watchdog._target.provider,
                model=self._watchdog._target.model,
            ) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (:meth:`read_chunk` until the end of the body)."""
        while chunk := await self.read_chunk():
            yield chunk

    async def read_body(self, limit: int) -> bytes:
        """The rest of the body, at most ``limit`` bytes (for error responses)."""
        return await _read_limited(self._resp, limit, self._watchdog._target)


async def _read_limited(resp: aiohttp.ClientResponse, limit: int, target: Target) -> bytes:
    length = resp.content_length
    if length is not None and length > limit:
        raise ProtocolError(
            f"response body of {length} bytes exceeds the limit of {limit} bytes",
            provider=target.provider,
            model=target.model,
            status=resp.status,
        )
    parts: list[bytes] = []
    size = 0
    content = resp.content
    try:
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ProtocolError(
                    f"response body exceeds the limit of {limit} bytes",
                    provider=target.provider,
                    model=target.model,
                    status=resp.status,
                )
            parts.append(chunk)
    except ProviderError:
        raise
    except (aiohttp.ClientError, OSError) as exc:
        raise _lost_connection(exc, target, resp.status) from exc
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _lost_connection(exc: BaseException, target: Target, status: int) -> ProviderConnectionError:
    return ProviderConnectionError(
        f"connection lost while reading the response: {type(exc).__name__}",
        provider=target.provider,
        model=target.model,
        status=status,
    )


class HttpClient:
    """One shared aiohttp session for all adapters of a client.

    The session is created on first use (inside the running event loop) and closed by :meth:`aclose`.
    """

    def __init__(self, *, connection_limit: int = 0, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owns = session is None
        self._limit = connection_limit
        self._ssl: dict[str, ssl.SSLContext] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def session(self) -> aiohttp.ClientSession:
        """The shared session (created on first call)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=None),
            )
            self._owns = True
        return self._session

    def ssl_context(self, ca_path: str | None) -> ssl.SSLContext | bool:
        """An SSL context trusting ``ca_path`` (built once per path), or the default verification."""
        if not ca_path:
            return True
        ctx = self._ssl.get(ca_path)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=ca_path)
            self._ssl[ca_path] = ctx
        return ctx

    async def aclose(self) -> None:
        """Close the session if this client created it."""
        if self._session is not None and self._owns and not self._session.closed:
            await self._session.close()
        self._session = None

    def _client_timeout(self, connect: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(connect)
        if timeout is None:
            timeout = self._timeouts[connect] = aiohttp.ClientTimeout(total=None, sock_connect=connect)
        return timeout

    async def _open(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        target: Target,
        ssl_context: ssl.SSLContext | bool,
    ) -> tuple[aiohttp.ClientResponse, _Watchdog]:
        """Send the request and wait for the response headers (bounded); start the body watchdog."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        task = asyncio.current_task()
        assert task is not None
        watchdog = _Watchdog(
            loop,
            task,
            first_deadline=start + timeouts.first_token,
            idle=timeouts.idle,
            total_deadline=start + timeouts.total,
            target=target,
        )
        try:
            resp = await self.session().post(
                url, data=body, headers=headers, timeout=self._client_timeout(timeouts.connect), ssl=ssl_context
            )
        except asyncio.CancelledError:
            watchdog.cancel()
            if watchdog.fired is None or task.uncancel() > 0:
                raise  # a cancellation of the caller, not our deadline
            first = watchdog.fired == "first_token"
            seconds = timeouts.first_token if first else timeouts.total
            raise ProviderTimeout(
                f"timed out after {seconds:g}s waiting for the response",
                phase=watchdog.fired,
                seconds=seconds,
                provider=target.provider,
                model=target.model,
            ) from None
        except aiohttp.ConnectionTimeoutError as exc:
            watchdog.cancel()
            raise ProviderTimeout(
                f"timed out connecting after {timeouts.connect:g}s",
                phase="connect",
                seconds=timeouts.connect,
                provider=target.provider,
                model=target.model,
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            watchdog.cancel()
            raise ProviderConnectionError(
                scrub(f"connection failed: {type(exc).__name__}: {exc}", target.secrets)[:500],
                provider=target.provider,
                model=target.model,
            ) from exc
        watchdog.attach(resp.content)
        return resp, watchdog

    @staticmethod
    def _finish(resp: aiohttp.ClientResponse, watchdog: _Watchdog) -> None:
        """Stop the watchdog; reuse the connection when the body was read to its end, else close it."""
        watchdog.cancel()
        if resp.content.at_eof():
            resp.release()
        else:
            resp.close()

    async def post(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        target: Target,
        max_bytes: int,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> HttpResponse:
        """POST ``body`` and read the whole response (bounded in time and size).

        Raises:
            ProviderTimeout: A time bound was exceeded.
            ProviderConnectionError: The connection failed or was reset.
            ProtocolError: The body is larger than ``max_bytes``.
        """
        resp, watchdog = await self._open(url, headers, body, timeouts, target, ssl_context)
        try:
            length = resp.content_length
            if length is not None and length <= max_bytes:  # the common case: aiohttp's own fast read
                try:
                    data = await resp.read()
                except ProviderError:
                    raise
                except (aiohttp.ClientError, OSError) as exc:
                    raise _lost_connection(exc, target, resp.status) from exc
            else:
                data = await _read_limited(resp, max_bytes, target)
            return HttpResponse(resp.status, resp.headers, data)
        finally:
            self._finish(resp, watchdog)

    @asynccontextmanager
    async def stream(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        target: Target,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> AsyncIterator[StreamingResponse]:
        """POST ``body`` and yield the open response once its headers arrived.

        Leaving the context early (an exception, a consumer that stopped) closes the connection, so the
        upstream sees the client go; a body read to its end releases the connection to the pool.
        """
        resp, watchdog = await self._open(url, headers, body, timeouts, target, ssl_context)
        try:
            yield StreamingResponse(resp, watchdog)
        finally:
            self._finish(resp, watchdog)
