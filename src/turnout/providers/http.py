"""The HTTP transport every adapter shares: one aiohttp session, time bounds, size bounds, typed errors.

Time bounds per attempt: ``connect`` (opening the connection), ``first_token`` (from sending
the request to the response headers and, for a stream, its first body byte), ``idle`` (silence between
body bytes) and ``total`` (the whole attempt). aiohttp keeps three of them for each request: ``connect`` is
its ``sock_connect``; ``total`` is its ``total``, which ends with the body's last byte (a consumer slower
than the bounds still reads a body that arrived in time); ``idle`` is its ``sock_read``, switched on at
the first body byte: it measures the connection's own silence, and pauses while a consumer that has not
caught up holds reading back. The first-token bound is an ``asyncio.timeout`` around the wait for the
headers and each wait for body bytes until the first arrives. Which bound ended an attempt is the phase of
its :class:`~turnout.core.errors.ProviderTimeout`.

A URL given as a ``yarl.URL`` built with ``encoded=True`` is sent as it is: a signed path keeps its escapes
(``%3A`` in a Bedrock model id), which a string would lose to yarl's normalisation.

Size bounds count the bytes *after* decompression: aiohttp inflates a ``Content-Encoding`` (gzip, deflate, br
with Brotli installed) a bounded piece at a time as the body is read, so a whole body is read piece by piece and
its decoded size compared with ``max_response_bytes`` as it grows (the compressed ``Content-Length`` says nothing
about what it inflates to). A stream is bounded the same way in total, encoded or not: everything a stream's
parsers and builders hold (text, reasoning, tool arguments, a frame being read) is decoded from its body, so the
body's decoded total bounds it, counted here once for every adapter. Either raises
:class:`~turnout.core.errors.ResponseTooLarge` with memory bounded by the limit.

Every aiohttp and socket exception is translated here, at one boundary, into a
:class:`~turnout.core.errors.ProviderError` subclass (``raise ... from exc``).
"""

from __future__ import annotations

import asyncio
import errno
import math
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from turnout.core.errors import ProviderConnectionError, ProviderError, ProviderTimeout, ResponseTooLarge
from turnout.core.secrets import scrub

USER_AGENT = "turnout/0.1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Time bounds of one attempt, in seconds."""

    connect: float = 10.0
    first_token: float = 60.0
    idle: float = 60.0
    total: float = 120.0
    #: The bounds aiohttp keeps from the start of each request (``connect``, ``total``), made once here.
    client: aiohttp.ClientTimeout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Never rounded up to a whole second (aiohttp's default for bounds of 5 s and more): each is as configured.
        client = aiohttp.ClientTimeout(total=self.total, sock_connect=self.connect, ceil_threshold=math.inf)
        object.__setattr__(self, "client", client)


@dataclass(frozen=True, slots=True, kw_only=True)
class Callee:
    """Who is being called, for error messages, and the secrets to scrub from them.

    Attributes:
        profile: The profile being called (what an error names as its provider).
        model: The model asked for, if known.
        secrets: The credentials to scrub from any message.
    """

    profile: str
    model: str | None
    secrets: tuple[str, ...] = ()


class HttpResponse(NamedTuple):
    """A complete (non-streaming) response (a named tuple: one is made per call)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


_tuple_new = tuple.__new__

#: What a body read was waiting for, by the bound that ended it (for its ``ProviderTimeout``'s message).
_WAITING_FOR = {"first_token": "the first token", "idle": "more stream data", "total": "the attempt's total time"}


class StreamingResponse:
    """A response being read: ``async with`` opens it (:meth:`HttpClient.stream`); iterate :meth:`chunks`.

    Entering sends the request and waits for the response headers (bounded). Reading the body is bounded as
    the module says: until the first body byte by the first-token deadline (unless the total one comes
    first), from it on by aiohttp's idle and total bounds. Leaving releases the connection when the body
    was read to its end, else closes it. The request and its response are one object (one made per
    attempt); ``status``, ``headers`` and the response are set when it opens.
    """

    __slots__ = ("_args", "_client", "_first", "_idle", "_left", "_resp", "headers", "status")

    _resp: aiohttp.ClientResponse
    #: When the first body byte is due while none arrived (None: one did, or the total bound comes first).
    _first: float | None
    #: The idle bound, switched on at the first body byte (None once it is).
    _idle: float | None
    status: int
    headers: CIMultiDictProxy[str]

    def __init__(
        self,
        client: HttpClient,
        args: tuple[str | URL, Mapping[str, str], bytes, Timeouts, Callee, ssl.SSLContext | bool],
        max_bytes: int | None = None,
    ) -> None:
        self._client = client
        self._args = args
        #: Decoded bytes the stream may still bring (None: unbounded in total, bounded per event).
        self._left = max_bytes

    async def __aenter__(self) -> StreamingResponse:
        """Send the request and wait for the response headers; the open response."""
        url, headers, body, timeouts, callee, ssl_context = self._args
        request = self._client._request(url, headers, body, timeouts, ssl_context)
        # The first-token bound is ours; aiohttp's total bound ends the wait instead when it is the shorter.
        first = asyncio.get_running_loop().time() + timeouts.first_token
        bound = asyncio.timeout_at(first if timeouts.first_token <= timeouts.total else None)
        try:
            async with bound:
                resp = await request
        except (aiohttp.ClientError, OSError) as exc:  # a TimeoutError is an OSError
            raise _failed(exc, bound.expired(), timeouts, callee, url)  # noqa: B904 - the cause is set by _failed
        self._resp, self.status, self.headers = resp, resp.status, resp.headers
        self._first = first if timeouts.first_token < timeouts.total else None
        self._idle = timeouts.idle
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Reuse the connection when the body was read to its end, else close it (the upstream sees the client go).

        A response aiohttp saw to the end of its body is ``closed`` already, its connection back in the pool.
        """
        resp = self._resp
        if not resp.closed:
            if resp.content.at_eof():
                resp.release()
            else:
                resp.close()

    async def _read(self) -> bytes:
        """The body bytes that arrived since the last read (waiting for some, bounded); ``b""`` at its end.

        Raises:
            ProviderTimeout: A time bound passed.
            aiohttp.ClientError: The connection failed (as may an ``OSError``): the callers say while doing what.
        """
        content = self._resp.content
        first = self._first
        bound: asyncio.Timeout | None = None
        try:
            # Past the first body byte (or with the total bound first), or with the whole body in: aiohttp's bounds.
            if first is None or content.is_eof():
                chunk = await content.readany()
            else:
                async with asyncio.timeout_at(first) as bound:
                    chunk = await content.readany()
        except aiohttp.ServerTimeoutError as exc:  # aiohttp's ``sock_read``
            raise self._timed_out("idle") from exc
        except TimeoutError:  # the first-token bound, else aiohttp's total bound: no one's cause
            raise self._timed_out("first_token" if bound is not None and bound.expired() else "total") from None
        if chunk and self._idle is not None:
            self._flowing(self._idle)
        return chunk

    def _flowing(self, idle: float) -> None:
        """The first body byte arrived: the first-token bound is over, the idle bound starts (aiohttp's)."""
        self._first = self._idle = None
        # Set on this response's connection as aiohttp's ``sock_read`` (each request sets its own): no
        # connection once the whole body arrived, which leaves nothing to bound.
        connection = self._resp.connection
        if connection is not None and (protocol := connection.protocol) is not None:
            protocol.read_timeout = idle
            protocol.start_timeout()

    def _timed_out(self, phase: str) -> ProviderTimeout:
        """The error of a body read that a time bound ended."""
        _, _, _, timeouts, callee, _ = self._args
        bounds = {"first_token": timeouts.first_token, "idle": timeouts.idle, "total": timeouts.total}
        return ProviderTimeout(
            f"timed out waiting for {_WAITING_FOR[phase]}",
            phase=phase,
            seconds=bounds[phase],
            provider=callee.profile,
            model=callee.model,
        )

    async def read_chunk(self) -> bytes:
        """The body bytes that arrived since the last read (waiting for some); ``b""`` at the end of the body.

        Raises:
            ProviderTimeout: A time bound passed.
            ProviderConnectionError: The connection was lost.
        """
        try:
            chunk = await self._read()
        except (aiohttp.ClientError, OSError) as exc:
            callee = self._args[4]
            raise ProviderConnectionError(
                f"connection lost while streaming: {type(exc).__name__}", provider=callee.profile, model=callee.model
            ) from exc
        if self._left is not None:
            self._left -= len(chunk)
            if self._left < 0:
                del chunk  # the error's traceback holds this frame: not the read past the bound
                raise self._too_large()
        return chunk

    def _too_large(self) -> ResponseTooLarge:
        """The error of a stream whose decoded total passed its bound; the connection is closed on leaving."""
        callee = self._args[4]
        encoded = "compressed " if _encoded(self.headers) else ""
        return ResponseTooLarge(
            f"{encoded}stream exceeds the response limit once decoded",
            provider=callee.profile,
            model=callee.model,
            status=self.status,
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (:meth:`read_chunk` until the end of the body)."""
        while chunk := await self.read_chunk():
            yield chunk

    async def read_body(self, limit: int) -> bytes:
        """The rest of the body (a whole answer, or an error's): at most ``limit`` bytes once decoded.

        Read piece by piece, its decoded size compared with ``limit`` as it grows.

        Raises:
            ProviderTimeout: A time bound passed.
            ProviderConnectionError: The connection was lost.
            ResponseTooLarge: The body is larger than ``limit`` (once decoded).
        """
        callee = self._args[4]
        length = self._resp.content_length
        if length is not None and length > limit:
            raise ResponseTooLarge(
                f"response body of {length} bytes exceeds the limit of {limit} bytes",
                provider=callee.profile,
                model=callee.model,
                status=self.status,
            )
        parts: list[bytes] = []
        size = 0
        try:
            while chunk := await self._read():
                size += len(chunk)
                if size > limit:
                    raise ResponseTooLarge(
                        f"response body exceeds the limit of {limit} bytes once decoded",
                        provider=callee.profile,
                        model=callee.model,
                        status=self.status,
                    )
                parts.append(chunk)
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderConnectionError(
                f"connection lost while reading the response: {type(exc).__name__}",
                provider=callee.profile,
                model=callee.model,
                status=self.status,
            ) from exc
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _encoded(headers: Mapping[str, str]) -> bool:
    """Whether a response's body is content-encoded (aiohttp decodes it as it is read)."""
    encoding = headers.get("Content-Encoding")
    return encoding is not None and encoding.strip().lower() not in ("", "identity")


def _failed(exc: BaseException, first_token: bool, timeouts: Timeouts, callee: Callee, url: str | URL) -> ProviderError:
    """The typed error of a request that failed before its headers arrived (its cause set).

    ``first_token``: our first-token bound ended the wait. aiohttp's total bound ends it with a bare
    ``TimeoutError`` (its other errors are its own classes, an ``OSError`` wrapped in one); its connect bound
    with ``ConnectionTimeoutError``. A bound that passed is no one's cause.
    """
    error: ProviderError
    if first_token or type(exc) is TimeoutError:
        seconds = timeouts.first_token if first_token else timeouts.total
        error = ProviderTimeout(
            f"timed out after {seconds:g}s waiting for the response",
            phase="first_token" if first_token else "total",
            seconds=seconds,
            provider=callee.profile,
            model=callee.model,
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
            provider=callee.profile,
            model=callee.model,
        )
    else:
        failure = connect_failure(exc)
        error = ProviderConnectionError(
            scrub(f"connection failed ({failure or 'other'}, {address}): {type(exc).__name__}: {exc}", callee.secrets)[
                :500
            ],
            failure=failure,
            address=address,
            provider=callee.profile,
            model=callee.model,
        )
    error.__cause__ = exc  # as ``raise ... from exc``
    return error


class Credential(dict[str, str]):
    """The fixed headers of one credential, and the session that sends them.

    An adapter makes one per key (:meth:`HttpClient.credential`) and never changes it. Requests made with it go
    through a session of its own that sends these headers as its defaults and shares the client's connection
    pool: kept because it is contained in this module and saves merging the headers into every request.
    """

    __slots__ = ("session",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__(headers)
        self.session: aiohttp.ClientSession | None = None


class HttpClient:
    """One shared aiohttp session for all adapters of a client.

    The session is created on first use (inside the running event loop) and closed by :meth:`aclose`.
    """

    def __init__(self, *, connection_limit: int = 0, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owns = session is None
        self._limit = connection_limit
        self._ssl: dict[str, ssl.SSLContext] = {}
        self._credential_sessions: list[tuple[Credential, aiohttp.ClientSession]] = []

    def credential(self, headers: Mapping[str, str]) -> Credential:
        """The fixed headers of one credential, to pass as ``headers`` of every request made with it."""
        return Credential(headers)

    def _credential_session(self, credential: Credential) -> aiohttp.ClientSession:
        """A session sending ``credential`` as its default headers, on the shared connection pool."""
        session = aiohttp.ClientSession(
            connector=self.session().connector,
            connector_owner=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT, **credential},
            timeout=aiohttp.ClientTimeout(total=None),  # each request brings its own
        )
        self._credential_sessions.append((credential, session))
        credential.session = session
        return session

    def session(self) -> aiohttp.ClientSession:
        """The shared session (created on first call)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=None),  # each request brings its own
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

    def _request(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        ssl_context: ssl.SSLContext | bool,
    ) -> Awaitable[aiohttp.ClientResponse]:
        """The request of one attempt: awaiting it sends it and waits for the response headers."""
        if type(headers) is Credential and self._owns:
            own = headers.session or self._credential_session(headers)
            return own.post(url, data=body, timeout=timeouts.client, ssl=ssl_context)
        session = self._session
        if session is None or (not self._owns and session.closed):  # ours is closed only by aclose()
            session = self.session()
        return session.post(url, data=body, headers=headers, timeout=timeouts.client, ssl=ssl_context)

    async def post(
        self,
        url: str | URL,
        *,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        callee: Callee,
        max_bytes: int,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> HttpResponse:
        """POST ``body`` and read the whole response (bounded in time and size).

        Raises:
            ProviderTimeout: A time bound was exceeded.
            ProviderConnectionError: The connection failed or was reset.
            ResponseTooLarge: The body is larger than ``max_bytes`` (once decoded).
        """
        async with StreamingResponse(self, (url, headers, body, timeouts, callee, ssl_context)) as resp:
            data = await resp.read_body(max_bytes)
        return _tuple_new(HttpResponse, (resp.status, resp.headers, data))  # a named tuple's __new__ is Python

    def stream(
        self,
        url: str | URL,
        *,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
        callee: Callee,
        ssl_context: ssl.SSLContext | bool = True,
        max_bytes: int | None = None,
    ) -> StreamingResponse:
        """POST ``body``; use as ``async with``: it gives the open response once its headers arrived.

        Leaving the context early (an exception, a consumer that stopped) closes the connection, so the
        upstream sees the client go; a body read to its end releases the connection to the pool. With
        ``max_bytes``, the stream brings at most that many bytes in total once decoded, content-encoded or not
        (reading past it raises :class:`~turnout.core.errors.ResponseTooLarge`): what its parsers accumulate is bounded
        by it.
        """
        return StreamingResponse(self, (url, headers, body, timeouts, callee, ssl_context), max_bytes)


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
