"""One request's record (:class:`Exchange`) and what a request handler needs of the gateway (:class:`Host`).

The handlers of :mod:`turnout.gateway.chat` and :mod:`turnout.gateway.counting` are given the gateway as a
:class:`Host` and the request's :class:`Exchange`; :class:`turnout.gateway.app.Gateway` is the one host, so
the handlers never refer back to the application that routes to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aiohttp import web

from turnout.client import Client
from turnout.core.attribution import Attempt
from turnout.gateway.access import Access, Caller
from turnout.gateway.conversations import Conversations
from turnout.gateway.edges import Edges
from turnout.gateway.failures import Failure
from turnout.gateway.spend import Hold
from turnout.gateway.surface import Surface
from turnout.reply import Reply


class Exchange:
    """What one request did, for its metrics and access-log line."""

    __slots__ = (
        "attempts",
        "call_id",
        "caller",
        "closed_by",
        "ended",
        "fallback",
        "hold",
        "interrupted",
        "model",
        "provider",
        "request_id",
        "route",
        "seconds",
        "stamped",
        "status",
        "stream",
        "surface",
    )
    #: Set when the request ends: its time in the gateway, and the wall-clock time it ended.
    seconds: float
    ended: float

    def __init__(self, surface: str, request_id: str) -> None:
        self.surface = surface
        self.request_id = request_id
        self.route: str | None = None
        self.status = 200
        self.stream = False
        self.caller: Caller | None = None
        self.provider: str | None = None
        self.model: str | None = None
        self.attempts: Sequence[Attempt] | None = None
        self.fallback: tuple[str, str] | None = None
        self.call_id: str | None = None
        self.interrupted = False
        #: The call's spend reservation (a limited key's): settled by its call's ledger record, which the spend book
        #: is told of; when the request ends first, it waits for that record (``SpendBook.ended``).
        self.hold: Hold | None = None
        #: Who ended the request early: ``client`` (it went away) or ``server`` (the drain's deadline cut it).
        self.closed_by: str | None = None
        #: The answer already carries the request id and CORS headers (see ``Edges.stamped``).
        self.stamped = False


class Host(Protocol):
    """What a request handler uses of the gateway: its client, access and edges, and how it answers failures."""

    client: Client
    access: Access
    edges: Edges
    conversations: Conversations
    max_body_bytes: int
    #: The drain's deadline has passed: requests still running are being cut.
    cutting: bool

    def error_response(self, surface: Surface, failure: Failure) -> web.Response:
        """An error in ``surface``'s shape, with ``Retry-After`` when the failure has one."""
        ...

    def failure_response(self, surface: Surface, exc: BaseException, ex: Exchange) -> web.Response:
        """The answer to a call that failed before any output: the surface's error, with its attempts counted."""
        ...

    def observe_reply(self, reply: Reply, ex: Exchange) -> None:
        """Note the accepted reply of the request (recorded when the request ends)."""
        ...

    def observe_attempts(
        self, attempts: Sequence[Attempt], ex: Exchange, *, provider: str | None = None, model: str | None = None
    ) -> None:
        """Note the attempts of a call that produced no accepted reply (recorded when the request ends)."""
        ...
