"""Connection limits of the gateway: header, idle and body timeouts, a connection cap, quiet accept errors.

aiohttp reads requests on a connection for as long as the client keeps it open. A client that connects and
sends nothing, sends a request head one byte at a time (slowloris) or a body that never ends would hold a
socket, and with enough of them the process runs out of descriptors. So every connection is in one phase:

- *head*: waiting for a complete request head, since the connection opened or the first byte of the next
  request arrived; closed after ``header_timeout_secs`` (10 s);
- *idle*: a kept-alive connection between requests, no byte yet; closed after ``idle_timeout_secs`` (75 s);
- *busy*: a request is being served; while its body is still arriving, closed after ``body_timeout_secs``
  (30 s) from its head. An answer that takes longer (a long stream) is not limited here.

One timer per server checks every connection a few times per shortest timeout (nothing per request). Past
``max_connections`` the oldest connections that are not serving a request are closed first; when every one
is busy, the new connection gets a 503 and is closed. Accept errors (out of descriptors), malformed requests
and cap events are logged at most once a second each, and a malformed request is answered with a fixed
400 that never repeats what was sent (a header may hold a key).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from turnout.config.schema import Gateway as GatewaySection

log = logging.getLogger("turnout.gateway")

_HEAD, _IDLE, _BUSY = 0, 1, 2
_UNSTAMPED = -1.0  # a phase began, and the next check stamps when

_MALFORMED = b'{"error":{"message":"malformed HTTP request","type":"invalid_request_error","code":"bad_request"}}'
_INTERNAL = b'{"error":{"message":"internal gateway error","type":"server_error","code":"internal_error"}}'
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: 99\r\n\r\n"
    b'{"error":{"message":"the gateway has too many connections","type":"server_error","code":"overloaded"}}'
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The connection limits, in seconds and connections (see the module docstring)."""

    header_timeout: float = 10.0
    idle_timeout: float = 75.0
    body_timeout: float = 30.0
    max_connections: int = 1024

    @classmethod
    def of(cls, section: GatewaySection) -> Limits:
        """The limits of a ``[gateway]`` section."""
        return cls(
            header_timeout=section.header_timeout_secs,
            idle_timeout=section.idle_timeout_secs,
            body_timeout=section.body_timeout_secs,
            max_connections=section.max_connections,
        )

    @property
    def tick(self) -> float:
        """How often every connection is checked: a quarter of the shortest timeout, within 50 ms to 1 s."""
        return min(1.0, max(0.05, min(self.header_timeout, self.idle_timeout, self.body_timeout) / 4))


class EveryOnceASecond:
    """Lets one message of each kind through per second, and says how many it held back."""

    __slots__ = ("_clock", "_held", "_last")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, kind: str, level: int, message: str, *args: object) -> None:
        """Log ``message % args`` unless a message of ``kind`` was logged less than a second ago."""
        now = self._clock()
        if now - self._last.get(kind, float("-inf")) < 1.0:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        suffix = f" ({held} more in the last second not logged)" if held else ""
        log.log(level, message + suffix, *args)


class ConnectionGuard:
    """Tracks the connections of one server, enforces :class:`Limits`, and quiets accept errors.

    Args:
        limits: The timeouts and the cap.
        quiet: The once-a-second limiter for its log lines.
    """

    def __init__(self, limits: Limits, quiet: EveryOnceASecond | None = None) -> None:
        self.limits = limits
        self.quiet = quiet or EveryOnceASecond()
        self._conns: dict[GuardedHandler, None] = {}  # oldest first
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous_handler: Any = None

    @property
    def count(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def phases(self) -> dict[str, int]:
        """How many connections are in each phase (``head``, ``idle``, ``busy``)."""
        names = ("head", "idle", "busy")
        out = dict.fromkeys(names, 0)
        for h in self._conns:
            out[names[h.guard_phase]] += 1
        return out

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start checking connections, and log the loop's accept errors quietly."""
        self._loop = loop
        self._previous_handler = loop.get_exception_handler()
        loop.set_exception_handler(self._loop_error)
        self._timer = loop.call_later(self.limits.tick, self._sweep)

    def stop(self) -> None:
        """Stop checking and give the loop its exception handler back."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._loop is not None and self._loop.get_exception_handler() == self._loop_error:
            self._loop.set_exception_handler(self._previous_handler)
        self._loop = None

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith("socket.accept()"):
            exc = context.get("exception")
            self.quiet.log(
                "accept",
                logging.ERROR,
                "turnout gateway: cannot accept connections (%s); raise the descriptor limit (ulimit -n) "
                "or lower [gateway] max_connections",
                exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__,
            )
            return
        if self._previous_handler is not None:
            self._previous_handler(loop, context)
        else:
            loop.default_exception_handler(context)

    # --- connections -------------------------------------------------------------------------------

    def opened(self, handler: GuardedHandler) -> None:
        """A connection was accepted: track it, and keep within the cap."""
        self._conns[handler] = None
        if len(self._conns) > self.limits.max_connections:
            self._make_room(handler)

    def closed(self, handler: GuardedHandler) -> None:
        """A connection ended."""
        self._conns.pop(handler, None)

    def _make_room(self, newest: GuardedHandler) -> None:
        for h in self._conns:
            if h is not newest and not h.serving():
                self._close(h)
                self.quiet.log(
                    "cap",
                    logging.WARNING,
                    "turnout gateway: %d connections (max_connections); closed the oldest idle one",
                    self.limits.max_connections,
                )
                return
        self.quiet.log(
            "cap_full",
            logging.WARNING,
            "turnout gateway: %d connections, all serving requests (max_connections); a new one got 503",
            self.limits.max_connections,
        )
        transport = newest.transport
        self._conns.pop(newest, None)
        if transport is not None:
            transport.write(_FULL)
            transport.close()

    def _close(self, handler: GuardedHandler) -> None:
        self._conns.pop(handler, None)
        transport = handler.transport
        if transport is not None:
            transport.close()

    def _sweep(self) -> None:
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        limits = self.limits
        for h in list(self._conns):
            phase = h.guard_phase
            if h.guard_since == _UNSTAMPED:
                h.guard_since = now
            if phase == _BUSY:
                if not h.serving():
                    h.guard_phase, h.guard_since = _IDLE, now
                elif h.reading_body() and now - h.guard_since > limits.body_timeout:
                    self._close(h)
            elif phase == _HEAD:
                if now - h.guard_since > limits.header_timeout:
                    self._close(h)
            elif now - h.guard_since > limits.idle_timeout:
                self._close(h)
        self._timer = loop.call_later(limits.tick, self._sweep)


#: aiohttp's own ``data_received``, called directly: ``super()`` would make a proxy object on every read.
_parse = RequestHandler.data_received


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler, reporting its phase to a :class:`ConnectionGuard`.

    Relies on two things aiohttp's handler has done since 3.8: a request head is queued in ``_messages``
    once parsed, and ``_waiter`` is pending while it waits for the next request. Malformed requests are
    answered with a fixed body and logged without what was sent.
    """

    __slots__ = ("guard", "guard_phase", "guard_since")

    def __init__(self, manager: web.Server, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.guard_phase = _HEAD
        self.guard_since = 0.0

    def serving(self) -> bool:
        """Whether a request is being received or answered (not waiting for the next one)."""
        waiter = self._waiter
        return (waiter is None or waiter.done()) and self.guard_phase == _BUSY

    def reading_body(self) -> bool:
        """Whether the request being served still has body bytes to come."""
        request = self._current_request
        return request is not None and not request.content.is_eof()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the header timeout, and register with the guard (which may close another connection)."""
        super().connection_made(transport)
        self.guard_since = self._loop.time()
        self.guard.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        """Deregister, then let aiohttp clean up."""
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse as aiohttp does, then note a complete request head (busy) or the first byte of one (head).

        The phase's start is left for the guard's next check to stamp (``_UNSTAMPED``): that costs a timeout
        at most one check interval and saves reading the clock on every request.
        """
        _parse(self, data)
        if self._messages:
            self.guard_phase, self.guard_since = _BUSY, _UNSTAMPED
        elif self.guard_phase == _IDLE or (self.guard_phase == _BUSY and not self.serving()):
            self.guard_phase, self.guard_since = _HEAD, _UNSTAMPED

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A fixed answer for a request aiohttp could not parse or handle; the log names no header or value."""
        self.guard.quiet.log(
            f"http_{status}",
            logging.WARNING if status < 500 else logging.ERROR,
            "turnout gateway: %s request from %s answered %d (%s)",
            "malformed" if status < 500 else "failed",
            request.remote,
            status,
            type(exc).__name__ if exc is not None else "no detail",
        )
        body = _MALFORMED if status < 500 else _INTERNAL
        response = web.Response(status=status, body=body, content_type="application/json")
        response.force_close()
        return response


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections are :class:`GuardedHandler` objects of one guard.

    Args:
        runner: A set-up :class:`aiohttp.web.AppRunner`.
        guard: The guard of the connections.
        host: The address to listen on.
        port: The port (0: a free one).
        reuse_port: Set ``SO_REUSEPORT``.
        backlog: The listen backlog.
        handler_options: Options for aiohttp's connection handler (``keepalive_timeout``, ``access_log``, ...).
    """

    __slots__ = ("_guard", "_host", "_options", "_port", "_reuse_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        guard: ConnectionGuard,
        host: str,
        port: int,
        *,
        reuse_port: bool = False,
        backlog: int = 1024,
        handler_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._guard = guard
        self._host = host
        self._port = port
        self._reuse_port = reuse_port
        self._options = handler_options or {}

    @property
    def name(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        """Listen, and start the guard."""
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None  # the runner is set up

        def connection() -> GuardedHandler:
            return GuardedHandler(server, self._guard, loop=loop, **self._options)

        self._server = await loop.create_server(
            connection,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
            reuse_port=self._reuse_port or None,
        )
        self._guard.start(loop)

    async def stop(self) -> None:
        """Stop the guard and listening (connections are closed by the runner)."""
        self._guard.stop()
        await super().stop()
