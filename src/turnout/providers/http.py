"""The HTTP transport every adapter shares: one aiohttp session, time bounds, size bounds, typed errors.

Time bounds per attempt (SPEC 7.3): ``connect`` (opening the connection), ``first_token`` (from sending
the request to the response headers and, for a stream, its first body byte), ``idle`` (silence between
body bytes) and ``total`` (the whole attempt). Body bytes are watched by a lazy watchdog that reads the
connection's byte counter a few times per idle period, so reading a chunk costs nothing extra, and one timer
per event loop checks every attempt in flight, so an attempt that ends in time costs no timer at all.

A URL given as a ``yarl.URL`` built with ``encoded=True`` is sent as it is: a signed path keeps its escapes
(``%3A`` in a Bedrock model id), which a string would lose to yarl's normalisation.

Size bounds count the bytes *after* decompression: aiohttp inflates a ``Content-Encoding`` (gzip, deflate, br
with Brotli installed) a bounded piece at a time as the body is read, so a whole body is read piece by piece and
its decoded size compared with ``max_response_bytes`` as it grows (the compressed ``Content-Length`` says nothing
about what it inflates to). A stream is bounded the same way in total, encoded or not: everything a stream's
parsers and builders hold (text, reasoning, tool arguments, a frame being read) is decoded from its body, so the
body's decoded total bounds it, counted here once for every adapter. Either raises
:class:`~turnout.errors.ResponseTooLarge` with memory bounded by the limit.

Every aiohttp and socket exception is translated here, at one boundary, into a
:class:`~turnout.errors.ProviderError` subclass (``raise ... from exc``).
"""

from __future__ import annotations

import asyncio
import errno
import math
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from turnout.config.secrets import scrub
from turnout.errors import ProviderConnectionError, ProviderError, ProviderTimeout, ResponseTooLarge

USER_AGENT = "turnout/0.1"
#: What sending a request and waiting for its headers may raise (translated by ``HttpClient._failed``).
_SEND_FAILURES = (asyncio.CancelledError, aiohttp.ClientError, OSError)


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Time bounds of one attempt, in seconds."""

    connect: float = 10.0
    first_token: float = 60.0
    idle: float = 60.0
    total: float = 120.0
    #: How long after its start an attempt is first due to be checked (worked out here, not per attempt).
    first_check: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "first_check", min(_step(self.idle), self.first_token, self.total))


def _step(idle: float) -> float:
    """How often an attempt's body is checked: a few times per idle period.

    Before the first byte too: the idle bound must start as soon as bytes flow, not at the first-token deadline.
    """
    return max(idle / 4, 0.01)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Who is being called, for error messages, and the secrets to scrub from them."""

    provider: str
    model: str | None
    secrets: tuple[str, ...] = ()


class HttpResponse(NamedTuple):
    """A complete (non-streaming) response (a named tuple: one is made per call)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


_tuple_new = tuple.__new__


class _Watchdog:
    """The time bounds of one attempt: the wait for the response headers, then the body's bytes.

    Before the headers it cancels the waiting task at the first-token (or total) deadline; the caller turns
    that cancellation into :class:`ProviderTimeout`. Once the body is attached (``_content`` set), instead of
    re-arming a timer on every chunk, it checks the connection's byte counter a few times per idle period and
    injects a :class:`ProviderTimeout` into the body reader when a bound has passed. It owns no timer: the
    client's :class:`_Deadlines` checks every attempt in flight from one.

    Made once per attempt, so making one is all it costs: it joins its deadlines as it is made, and leaves them
    with one ``pop``. Its deadlines are worked out from ``_start`` and ``_timeouts`` only when it is checked,
    and the slots that would start empty (``_content``, ``_seen``, ``_last``, ``fired``) stay unset until they
    get a value: an attempt that ends in time never stores them (their readers give the empty value).
    """

    __slots__ = ("_content", "_last", "_seen", "_start", "_target", "_task", "_timeouts", "fired")

    _content: aiohttp.StreamReader  # set when the headers arrived
    _seen: int  # the body's byte count when last checked, once bytes flowed
    _last: float  # when that count last changed
    fired: str  # the phase whose bound ended the header wait

    def __init__(
        self, deadlines: _Deadlines, task: asyncio.Task[Any], start: float, timeouts: Timeouts, target: Target
    ) -> None:
        self._task = task
        self._start = start
        self._timeouts = timeouts
        self._target = target
        deadlines._watched[self] = None
        due = start + timeouts.first_check  # the first ``due``: ``min`` of the three, each ``start +``
        if due < deadlines._when:
            deadlines._arm(due, start)

    def due(self, now: float) -> float:
        """When this attempt should next be checked."""
        timeouts = self._timeouts
        total = self._start + timeouts.total
        if getattr(self, "_seen", 0) <= 0:
            return min(now + _step(timeouts.idle), self._start + timeouts.first_token, total)
        return min(now + _step(timeouts.idle), self._last + timeouts.idle, total)

    def check(self, now: float) -> float | None:
        """Enforce the bounds at ``now``; the next time to check, or None when there is nothing left to watch."""
        timeouts = self._timeouts
        first = self._start + timeouts.first_token
        total = self._start + timeouts.total
        content: aiohttp.StreamReader | None = getattr(self, "_content", None)
        if content is None:  # still waiting for the headers
            if now >= total or now >= first:
                self.fired = "first_token" if first <= total else "total"
                self._task.cancel()
                return None
            return self.due(now)
        if content.is_eof():
            # The whole body arrived: a consumer slower than the bounds must still read it.
            return None
        seen = content.total_raw_bytes
        if seen > 0 and seen != getattr(self, "_seen", 0):
            self._seen = seen
            self._last = now
        if now >= total:
            self._fire(content, "total", timeouts.total)
        elif seen <= 0 and now >= first:
            self._fire(content, "first_token", None)
        elif seen > 0 and now - self._last >= timeouts.idle:
            self._fire(content, "idle", timeouts.idle)
        else:
            return self.due(now)
        return None

    def _fire(self, content: aiohttp.StreamReader, phase: str, seconds: float | None) -> None:
        what = {"total": "the attempt's total time", "first_token": "the first token", "idle": "more stream data"}
        content.set_exception(
            ProviderTimeout(
                f"timed out waiting for {what[phase]}",
                phase=phase,
                seconds=seconds,
                provider=self._target.provider,
                model=self._target.model,
            )
        )


_loop_time = asyncio.BaseEventLoop.time


class _Deadlines:
    """One timer for all the attempts in flight on an event loop.

    A timer per attempt (armed, then cancelled when the answer arrives in time) costs more than the rest of
    the transport; here an attempt only joins (:class:`_Watchdog`) and leaves (``_watched.pop``) a dict. The
    timer fires when the soonest attempt is due, checks every attempt, and re-arms for the next; with nothing
    in flight it is not re-armed. A client starts with one bound to no loop, which no attempt uses.

    Attributes:
        clock: The loop's clock: ``time.monotonic`` itself when the loop's ``time`` is asyncio's own (which
            returns just that, through a Python call), else the loop's ``time``.
    """

    __slots__ = ("_handle", "_loop", "_watched", "_when", "clock")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._watched: dict[_Watchdog, None] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf
        self.clock: Callable[[], float] = time.monotonic if loop is None or type(loop).time is _loop_time else loop.time

    def _arm(self, when: float, now: float) -> None:
        assert self._loop is not None  # attempts join only deadlines bound to their loop
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        self._handle = self._loop.call_at(max(when, now + 0.001), self._tick)

    def _tick(self) -> None:
        self._handle = None
        self._when = math.inf
        now = self.clock()
        soonest = math.inf
        watched = self._watched
        for watchdog in list(watched):
            due = watchdog.check(now)
            if due is None:
                watched.pop(watchdog, None)
            elif due < soonest:
                soonest = due
        if soonest < math.inf:
            self._arm(soonest, now)


class StreamingResponse:
    """A streaming response (:meth:`HttpClient.stream`): ``async with`` opens it; iterate :meth:`chunks`.

    Entering sends the request and waits for the response headers (bounded); the watchdog then watches the
    body. Leaving stops watching and releases the connection when the body was read to its end, else closes
    it. The request and its response are one object (one made per stream); ``status``, ``headers`` and the
    response are set when it opens.
    """

    __slots__ = ("_args", "_client", "_left", "_resp", "_watchdog", "headers", "status")

    _resp: aiohttp.ClientResponse
    _watchdog: _Watchdog
    status: int
    headers: CIMultiDictProxy[str]

    def __init__(
        self,
        client: HttpClient,
        args: tuple[str | URL, Mapping[str, str], bytes, Timeouts, Target, ssl.SSLContext | bool],
        max_bytes: int | None = None,
    ) -> None:
        self._client = client
        self._args = args
        #: Decoded bytes the stream may still bring (None: unbounded in total, bounded per event).
        self._left = max_bytes

    async def __aenter__(self) -> StreamingResponse:
        """Send the request and wait for the response headers; the open response."""
        client = self._client
        url, headers, body, timeouts, target, ssl_context = self._args
        request, watchdog = client._start(url, headers, body, timeouts, target, ssl_context)
        try:
            resp = await request
        except _SEND_FAILURES as exc:
            raise client._failed(exc, watchdog, timeouts, target, url)  # noqa: B904 - the cause is set by _failed
        watchdog._content = resp.content  # the headers arrived: watch the body from now on
        self._resp, self._watchdog, self.status, self.headers = resp, watchdog, resp.status, resp.headers
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop watching; reuse the connection when the body was read to its end, else close it."""
        resp = self._resp
        self._client._deadlines._watched.pop(self._watchdog, None)
        if resp.content.at_eof():
            resp.release()
        else:
            resp.close()

    async def read_chunk(self) -> bytes:
        """The body bytes that arrived since the last read (waiting for some); ``b""`` at the end of the body.

        Raises:
            ProviderTimeout: A time bound passed.
            ProviderConnectionError: The connection was lost.
        """
        try:
            chunk = await self._resp.content.readany()
        except ProviderError:
            raise
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderConnectionError(
                f"connection lost while streaming: {type(exc).__name__}",
                provider=self._watchdog._target.provider,
                model=self._watchdog._target.model,
            ) from exc
        if self._left is not None:
            self._left -= len(chunk)
            if self._left < 0:
                del chunk  # the error's traceback holds this frame: not the read past the bound
                raise self._too_large()
        return chunk

    def _too_large(self) -> ResponseTooLarge:
        """The error of a stream whose decoded total passed its bound; the connection is closed on leaving."""
        target = self._watchdog._target
        encoded = "compressed " if _encoded(self.headers) else ""
        return ResponseTooLarge(
            f"{encoded}stream exceeds the response limit once decoded",
            provider=target.provider,
            model=target.model,
            status=self.status,
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (:meth:`read_chunk` until the end of the body)."""
        while chunk := await self.read_chunk():
            yield chunk

    async def read_body(self, limit: int) -> bytes:
        """The rest of the body, at most ``limit`` bytes (for error responses)."""
        return await _read_limited(self._resp, limit, self._watchdog._target)


def _encoded(headers: Mapping[str, str]) -> bool:
    """Whether a response's body is content-encoded (aiohttp decodes it as it is read)."""
    encoding = headers.get("Content-Encoding")
    return encoding is not None and encoding.strip().lower() not in ("", "identity")


async def _read_limited(resp: aiohttp.ClientResponse, limit: int, target: Target) -> bytes:
    """The whole body, read piece by piece: at most ``limit`` bytes once decoded, else :class:`ResponseTooLarge`."""
    length = resp.content_length
    if length is not None and length > limit:
        raise ResponseTooLarge(
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
                raise ResponseTooLarge(
                    f"response body exceeds the limit of {limit} bytes once decoded",
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


class Credential(dict[str, str]):
    """The fixed headers of one credential, and the session that sends them.

    An adapter makes one per key (:meth:`HttpClient.credential`) and never changes it. Requests made with it go
    through a session of its own that sends these headers as its defaults and shares the client's connection
    pool: kept because it is contained in this module and saves merging the headers into every request.
    """

    __slots__ = ("connect", "session")

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__(headers)
        self.session: aiohttp.ClientSession | None = None
        self.connect = 0.0


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
        self._deadlines = _Deadlines(None)
        self._credential_sessions: list[tuple[Credential, aiohttp.ClientSession]] = []

    def credential(self, headers: Mapping[str, str]) -> Credential:
        """The fixed headers of one credential, to pass as ``headers`` of every request made with it."""
        return Credential(headers)

    def _credential_session(self, credential: Credential, connect: float) -> aiohttp.ClientSession:
        """A session sending ``credential`` as its default headers, on the shared connection pool."""
        session = aiohttp.ClientSession(
            connector=self.session().connector,
            connector_owner=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT, **credential},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect),
        )
        self._credential_sessions.append((credential, session))
        credential.session, credential.connect = session, connect
        return session

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
        """Close the sessions this client created."""
        sessions, self._credential_sessions = self._credential_sessions, []
        for credential, session in sessions:
            await session.close()  # not the pool's owner: the pool closes with the shared session
            if credential.session is session:
                credential.session = None  # a request after this makes a new one: none is closed by anyone else
        if self._session is not None and self._owns and not self._session.closed:
            await self._session.close()
        self._session = None

    def _client_timeout(self, connect: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(connect)
        if timeout is None:
            timeout = self._timeouts[connect] = aiohttp.ClientTimeout(total=None, sock_connect=connect)
        return timeout

    def _start(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        target: Target,
        ssl_context: ssl.SSLContext | bool,
    ) -> tuple[Awaitable[aiohttp.ClientResponse], _Watchdog]:
        """Watch a new attempt and make its request: awaiting it sends the request and waits for the headers."""
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if deadlines._loop is not loop:
            deadlines = self._deadlines = _Deadlines(loop)
        task = asyncio.current_task(loop)  # given the loop, it is not looked up again
        assert task is not None
        watchdog = _Watchdog(deadlines, task, deadlines.clock(), timeouts, target)
        if type(headers) is Credential and self._owns:
            session = headers.session
            if session is None or headers.connect != timeouts.connect:
                session = self._credential_session(headers, timeouts.connect)
            return session.post(url, data=body, ssl=ssl_context), watchdog
        session = self._session
        if session is None or (not self._owns and session.closed):  # ours is closed only by aclose()
            session = self.session()
        timeout = self._timeouts.get(timeouts.connect) or self._client_timeout(timeouts.connect)
        return session.post(url, data=body, headers=headers, timeout=timeout, ssl=ssl_context), watchdog

    def _failed(
        self, exc: BaseException, watchdog: _Watchdog, timeouts: Timeouts, target: Target, url: str | URL
    ) -> BaseException:
        """What to raise for a request that failed before its headers arrived: its typed error, or ``exc`` itself.

        A cancellation is ours only when the watchdog's deadline caused it; any other is the caller's (``exc``).
        """
        self._deadlines._watched.pop(watchdog, None)
        error: ProviderError
        if isinstance(exc, asyncio.CancelledError):
            fired: str | None = getattr(watchdog, "fired", None)
            if fired is None or watchdog._task.uncancel() > 0:
                return exc
            seconds = timeouts.first_token if fired == "first_token" else timeouts.total
            error = ProviderTimeout(
                f"timed out after {seconds:g}s waiting for the response",
                phase=fired,
                seconds=seconds,
                provider=target.provider,
                model=target.model,
            )
            error.__cause__, error.__suppress_context__ = None, True  # as ``raise ... from None``
            return error
        address = _address(exc, str(url))
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            error = ProviderTimeout(
                f"timed out connecting to {address} after {timeouts.connect:g}s",
                phase="connect",
                seconds=timeouts.connect,
                address=address,
                provider=target.provider,
                model=target.model,
            )
        else:
            failure = connect_failure(exc)
            error = ProviderConnectionError(
                scrub(
                    f"connection failed ({failure or 'other'}, {address}): {type(exc).__name__}: {exc}", target.secrets
                )[:500],
                failure=failure,
                address=address,
                provider=target.provider,
                model=target.model,
            )
        error.__cause__ = exc  # as ``raise ... from exc``
        return error

    async def post(
        self,
        url: str | URL,
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
            ResponseTooLarge: The body is larger than ``max_bytes`` (once decoded).
        """
        # What ``StreamingResponse.__aenter__`` does, without a coroutine of its own (one request per try).
        request, watchdog = self._start(url, headers, body, timeouts, target, ssl_context)
        try:
            resp = await request
        except _SEND_FAILURES as exc:
            raise self._failed(exc, watchdog, timeouts, target, url)  # noqa: B904 - the cause is set by _failed
        content = watchdog._content = resp.content  # the headers arrived: watch the body from now on
        try:
            length = resp.content_length
            # The common case, a plain body of a known size within the bound: aiohttp's own fast read. An encoded body's
            # length is its compressed size, which bounds nothing: it is read piece by piece and counted decoded.
            if length is not None and length <= max_bytes and not _encoded(resp.headers):
                try:
                    data = await resp.read()
                except ProviderError:
                    raise
                except (aiohttp.ClientError, OSError) as exc:
                    raise _lost_connection(exc, target, resp.status) from exc
            else:
                data = await _read_limited(resp, max_bytes, target)
            return _tuple_new(HttpResponse, (resp.status, resp.headers, data))  # a named tuple's __new__ is Python
        finally:
            # Stop watching, and hand the connection back. A response aiohttp saw to the end of its body is
            # ``closed`` already, its connection back in the pool: releasing it again would only mark its reader,
            # which no one holds once this returns (a ``StreamingResponse`` hands its reader out, so leaving one
            # still releases it).
            self._deadlines._watched.pop(watchdog, None)
            if not resp.closed:
                if content.at_eof():
                    resp.release()
                else:
                    resp.close()

    def stream(
        self,
        url: str | URL,
        *,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        target: Target,
        ssl_context: ssl.SSLContext | bool = True,
        max_bytes: int | None = None,
    ) -> StreamingResponse:
        """POST ``body``; use as ``async with``: it gives the open response once its headers arrived.

        Leaving the context early (an exception, a consumer that stopped) closes the connection, so the
        upstream sees the client go; a body read to its end releases the connection to the pool. With
        ``max_bytes``, the stream brings at most that many bytes in total once decoded, content-encoded or not
        (reading past it raises :class:`~turnout.errors.ResponseTooLarge`): what its parsers accumulate is bounded
        by it.
        """
        return StreamingResponse(self, (url, headers, body, timeouts, target, ssl_context), max_bytes)


def connect_failure(exc: BaseException) -> str | None:
    """Which way a connection failed before its answer: ``refused``, ``dns``, ``tls``, ``reset`` (None: another)."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "dns"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError | ssl.SSLError):
        return "tls"
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "refused"
    if isinstance(cause, socket.gaierror):
        return "dns"
    if isinstance(cause, ssl.SSLError):
        return "tls"
    if isinstance(cause, ConnectionResetError | aiohttp.ServerDisconnectedError):
        return "reset"
    if isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED:  # aiohttp's own OSError of a refusal
        return "refused"
    return None


def _address(exc: BaseException, url: str | URL) -> str:
    """``host:port`` of the endpoint a failed request went to (the connector's, else the URL's)."""
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.host:
        host, port = exc.host, exc.port
    else:
        parts = urlsplit(str(url))
        host = parts.hostname or "?"
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = None
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host
