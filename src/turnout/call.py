"""One logical call (a chat, a stream, a turn): what it asked for, its attempts, and the answer it accepts.

The client opens a :class:`Call` for every request, with the :class:`CallPlan` it keeps for the route; the
call is the dispatch scope in which the walk records its attempts, and the walk returns the route that
answered. Only when the caller accepts that answer does :meth:`Call.accept` commit the served route, decide
the fallback notice (the one place that rule lives) and write the ledger record; a failure is
recorded by :meth:`Call.fail` with the outcome names the ledger uses. With tracing on, both also hand the
finished call to its :class:`CallTracer`, which makes its spans from the records after the fact, so nothing
is traced while the call is in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from turnout.core.attribution import Attempt, DispatchScope, FallbackNotice, RouteRef, fallback_notice
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    RefusalError,
    StreamInterruptedAfterOutput,
    TurnCancelled,
)
from turnout.core.streams import without_think
from turnout.core.types import ChatRequest, ChatResponse
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger
from turnout.reply import Reply

#: What kind of call it is: ``Client.chat``, ``Client.stream``, ``Client.turn`` or ``Client.embed``.
Operation: TypeAlias = Literal["chat", "stream", "turn", "embed"]

_CALL_PREFIX = os.urandom(6).hex()
_call_numbers = itertools.count(1)


def new_call_id() -> str:
    """A unique call id: a per-process random prefix (12 hex digits) and a counter (10 hex digits)."""
    return f"{_CALL_PREFIX}{next(_call_numbers):010x}"


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
    """What records a finished call as trace spans (:class:`turnout.observability.tracing.Tracing`)."""

    def accepted(self, call: Call, response: ChatResponse, served: RouteRef, notice: FallbackNotice | None) -> None:
        """``call`` ended with ``response`` from ``served`` as its answer."""

    def failed(self, call: Call, exc: BaseException) -> None:
        """``call`` ended without an answer, with ``exc``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallPlan:
    """What every call of one kind to one route shares, made once: the client keeps one per route and kind.

    Attributes:
        requested: The profile and model the caller asked for.
        operation: What kind of call it is: ``chat``, ``stream``, ``turn`` or ``embed``.
        ledger: Where a finished call is recorded (None: nowhere).
        surface: The ledger's label for where the calls come from (``library``, ``gateway``, ``cli``).
        intra_family: Whether fallbacks within one family are shown (``[notices] intra_family``).
        peers: Other entries whose answer is no fallback either: the members of a pool the route starts with.
        tracer: Records a finished call as trace spans (None: tracing is off).
    """

    requested: RouteRef
    operation: Operation
    ledger: Ledger | None = None
    surface: str = "library"
    intra_family: bool = False
    peers: frozenset[int] = frozenset()
    tracer: CallTracer | None = None

    @property
    def stream(self) -> bool:
        """Whether the calls stream (a stream or a turn)."""
        return self.operation == "stream" or self.operation == "turn"


class Call(DispatchScope):
    """One logical call in flight: the dispatch scope of its own attempts.

    Everything a call shares with the other calls of its kind to its route is its :class:`CallPlan`, made
    once; a call itself only gets its id, its attempt log, its start time, its caller and its request.

    Args:
        plan: What the call asks for and where it is recorded.
        call_id: The call's id (default: a new one; the gateway passes its request id).
        caller: Who makes the call (the gateway's client key name), recorded in the ledger.
        request: The request (kept for a tracer that records content).

    Attributes:
        call_id: The id of the call in the ledger.
        attempts: The attempts of the call, in order (the walk records them: the call is its dispatch scope).
    """

    __slots__ = ("caller", "plan", "request", "started")
    call_id: str  # always set, where a scope's may be None

    def __init__(
        self,
        plan: CallPlan,
        call_id: str | None = None,
        caller: str | None = None,
        request: ChatRequest | None = None,
    ) -> None:
        self.plan = plan
        self.attempts = []
        self.call_id = call_id if call_id is not None else new_call_id()
        self.abandoned = False
        self.caller = caller
        self.request = request
        self.started = time.time()
        ledger = plan.ledger
        if ledger is not None and ledger.listener is not None:  # its record will settle what it holds
            ledger.listener.opened(self.call_id)

    @property
    def requested(self) -> RouteRef:
        """The profile and model the caller asked for."""
        return self.plan.requested

    @property
    def stream(self) -> bool:
        """Whether the call streams."""
        return self.plan.stream

    @property
    def surface(self) -> str:
        """Where the call came from (``library``, ``gateway``, ``cli``)."""
        return self.plan.surface

    @property
    def operation(self) -> Operation:
        """What kind of call it is: ``chat``, ``stream`` or ``turn``."""
        return self.plan.operation

    def fallback(self, served: RouteRef, entry: int) -> FallbackNotice | None:
        """The notice for an answer from ``served`` (entry ``entry`` of the walk), or None when it is no fallback.

        A fallback is an answer from a later entry or from another model than the requested one; a pure
        retry of the first entry is not, and neither is an answer from another member of the pool the call
        asked for (:attr:`CallPlan.peers`: the members are interchangeable).
        """
        plan = self.plan
        requested = plan.requested
        if entry == 0 and served == requested:
            return None
        if entry in plan.peers:
            return None
        return fallback_notice(requested, served, intra_family=plan.intra_family)

    def accept(self, response: ChatResponse, served: RouteRef, entry: int) -> Reply:
        """Commit ``response`` from ``served`` (entry ``entry``) as the call's answer and record the call."""
        plan = self.plan
        requested = plan.requested
        notice = self.fallback(served, entry)
        attempts = tuple(self.attempts)
        self._record(attempts, "ok", served, notice)
        if "<think>" in response.text:
            response = without_think(response)
        if plan.tracer is not None:
            plan.tracer.accepted(self, response, served, notice)
        return Reply(
            text=response.text,
            tool_calls=response.tool_calls,
            usage=response.usage,
            finish_reason=response.finish_reason,
            reasoning=response.reasoning,
            requested=requested,
            served=served,
            fallback=notice,
            attempts=attempts,
            call_id=self.call_id,
            native=response.native,
        )

    def accept_embedding(self, served: RouteRef, entry: int) -> FallbackNotice | None:
        """Commit an embedding answer from ``served`` (entry ``entry``, the latest that served a batch): its notice.

        The ledger records the call as ``embed``; the fallback rule is :meth:`fallback`'s, as for a chat.
        """
        notice = self.fallback(served, entry)
        self._record(tuple(self.attempts), "ok", served, notice)
        return notice

    def fail(self, exc: BaseException) -> None:
        """Record the call as failed with ``exc`` (its attempts stay in the ledger; nothing is served)."""
        plan = self.plan
        if plan.tracer is not None and plan.operation != "embed":  # embedding calls are not traced (yet)
            plan.tracer.failed(self, exc)
        self._record(tuple(self.attempts), call_outcome(exc), None, None)

    def _record(
        self, attempts: tuple[Attempt, ...], outcome: str, served: RouteRef | None, notice: FallbackNotice | None
    ) -> None:
        """Write the call's one ledger record: its outcome, who served it (None: nobody) and its attempts."""
        plan = self.plan
        if plan.ledger is None:
            return
        embed = plan.operation == "embed"
        accepted = max((i for i, a in enumerate(attempts) if a.outcome == "ok"), default=None) if served else None
        plan.ledger.record(
            CallRecord(
                call_id=self.call_id,
                ts=self.started,
                surface=plan.surface,
                stream=False if embed else plan.stream,
                requested=plan.requested,
                served=served,
                fallback=notice is not None,
                outcome=outcome,
                attempts=attempts,
                accepted_index=accepted,
                caller=self.caller,
                operation="embed" if embed else None,
            )
        )
