"""One logical call (a chat, a stream, a turn): what it asked for, its attempts, and the answer it accepts.

The client opens a :class:`Call` for every request; the walk records the call's attempts in its
:attr:`Call.log`, and returns the route that answered. Only when the caller accepts that answer does
:meth:`Call.accept` commit the served route, decide the fallback notice (SPEC 8, the one place that rule
lives) and write the ledger record; a failure is recorded by :meth:`Call.fail` with the outcome names the
ledger uses. With tracing on, both also hand the finished call to its :class:`CallTracer`, which makes its
spans from the records after the fact, so nothing is traced while the call is in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Literal, Protocol, TypeAlias

from turnout.attribution import DispatchScope, FallbackNotice, RouteRef, fallback_notice
from turnout.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    RefusalError,
    StreamInterruptedAfterOutput,
    TurnCancelled,
)
from turnout.ledger import CallRecord, Ledger
from turnout.reply import Reply, new_reply
from turnout.streams import without_think
from turnout.types import ChatRequest, ChatResponse

#: What kind of call it is: ``Client.chat``, ``Client.stream`` or ``Client.turn``.
Operation: TypeAlias = Literal["chat", "stream", "turn"]

_CALL_PREFIX = os.urandom(6).hex()
#: The prefix and a counter in one number, under a leading 1 that keeps the prefix's leading zeros in ``hex()``.
_CALL_BASE = (1 << 88) | (int(_CALL_PREFIX, 16) << 40)
_call_numbers = itertools.count(1)


def new_call_id() -> str:
    """A unique call id: a per-process random prefix (12 hex digits) and a counter (10 hex digits).

    Cheaper than a UUID per call; ``hex()`` of one number is cheaper still than formatting the counter with a
    width (``format(n, "010x")``), and gives the same digits.
    """
    return hex(_CALL_BASE + next(_call_numbers))[3:]


def call_outcome(exc: BaseException) -> str:
    """The ledger outcome of a call that failed with ``exc``."""
    if isinstance(exc, AllProvidersFailed):
        return "all_failed"
    if isinstance(exc, RefusalError):
        return "refusal"
    if isinstance(exc, ContextWindowExceeded):
        return "context_window"
    if isinstance(exc, StreamInterruptedAfterOutput):
        return "stream_interrupted"
    if isinstance(exc, TurnCancelled | asyncio.CancelledError):
        return "cancelled"
    return type(exc).__name__


class CallTracer(Protocol):
    """What records a finished call as trace spans (:class:`turnout.tracing.Tracing`)."""

    def accepted(self, call: Call, response: ChatResponse, served: RouteRef, notice: FallbackNotice | None) -> None:
        """``call`` ended with ``response`` from ``served`` as its answer."""

    def failed(self, call: Call, exc: BaseException) -> None:
        """``call`` ended without an answer, with ``exc``."""


class Call:
    """One logical call in flight.

    Args:
        requested: The profile and model the caller asked for.
        stream: Whether the call streams.
        ledger: Where the finished call is recorded (None: nowhere).
        surface: The ledger's label for where the call came from (``library``, ``gateway``, ``cli``).
        intra_family: Whether fallbacks within one family are shown (``[notices] intra_family``).
        call_id: The call's id (default: a new one; the gateway passes its request id).
        caller: Who makes the call (the gateway's client key name), recorded in the ledger.
        peers: Other entries whose answer is no fallback either: the members of a pool the route starts with.
        operation: What kind of call it is (default: ``stream`` for a stream, else ``chat``).
        request: The request (kept for a tracer that records content).
        tracer: Records the finished call as trace spans (None: tracing is off).

    Attributes:
        call_id: The id of the call in the ledger.
        log: The attempts of the call, in order.
    """

    __slots__ = (
        "call_id",
        "caller",
        "intra_family",
        "ledger",
        "log",
        "operation",
        "peers",
        "request",
        "requested",
        "started",
        "stream",
        "surface",
        "tracer",
    )

    def __init__(
        self,
        requested: RouteRef,
        *,
        stream: bool,
        ledger: Ledger | None = None,
        surface: str = "library",
        intra_family: bool = False,
        call_id: str | None = None,
        caller: str | None = None,
        peers: frozenset[int] = frozenset(),
        operation: Operation | None = None,
        request: ChatRequest | None = None,
        tracer: CallTracer | None = None,
    ) -> None:
        self.requested = requested
        self.peers = peers
        self.stream = stream
        self.ledger = ledger
        self.surface = surface
        self.intra_family = intra_family
        self.caller = caller
        self.operation: Operation = operation or ("stream" if stream else "chat")
        self.request = request
        self.tracer = tracer
        self.call_id = call_id if call_id is not None else new_call_id()
        self.log = DispatchScope([], self.call_id)  # by position: a class called with keywords packs a dict
        self.started = time.time()

    def fallback(self, served: RouteRef, entry: int) -> FallbackNotice | None:
        """The notice for an answer from ``served`` (entry ``entry`` of the walk), or None when it is no fallback.

        A fallback is an answer from a later entry or from another model than the requested one; a pure
        retry of the first entry is not, and neither is an answer from another member of the pool the call
        asked for (:attr:`peers`: the members are interchangeable).
        """
        if entry == 0 and (served is self.requested or served == self.requested):
            return None
        if entry in self.peers:
            return None
        return fallback_notice(self.requested, served, intra_family=self.intra_family)

    def accept(self, response: ChatResponse, served: RouteRef, entry: int) -> Reply:
        """Commit ``response`` from ``served`` (entry ``entry``) as the call's answer and record the call."""
        # The requested route's own answer (the common case) is no fallback: known without asking the rule.
        notice = None if entry == 0 and served is self.requested else self.fallback(served, entry)
        attempts = tuple(self.log.attempts)
        if self.ledger is not None:
            accepted = max((i for i, a in enumerate(attempts) if a.outcome == "ok"), default=None)
            self.ledger.record(
                CallRecord(
                    call_id=self.call_id,
                    ts=self.started,
                    surface=self.surface,
                    stream=self.stream,
                    requested=self.requested,
                    served=served,
                    fallback=notice is not None,
                    outcome="ok",
                    attempts=attempts,
                    accepted_index=accepted,
                    caller=self.caller,
                )
            )
        if "<think>" in response.text:
            response = without_think(response)
        if self.tracer is not None:
            self.tracer.accepted(self, response, served, notice)
        return new_reply(
            text=response.text,
            tool_calls=response.tool_calls,
            usage=response.usage,
            finish_reason=response.finish_reason,
            reasoning=response.reasoning,
            requested=self.requested,
            served=served,
            fallback=notice,
            attempts=attempts,
            call_id=self.call_id,
            native=response.native,
        )

    def fail(self, exc: BaseException) -> None:
        """Record the call as failed with ``exc`` (its attempts stay in the ledger; nothing is served)."""
        if self.tracer is not None:
            self.tracer.failed(self, exc)
        if self.ledger is None:
            return
        self.ledger.record(
            CallRecord(
                call_id=self.call_id,
                ts=self.started,
                surface=self.surface,
                stream=self.stream,
                requested=self.requested,
                served=None,
                fallback=False,
                outcome=call_outcome(exc),
                attempts=tuple(self.log.attempts),
                caller=self.caller,
            )
        )
