"""One stream of a walk: the entry it opens, its tries before the first batch, a hedge, and the relay.

:meth:`ReliableProvider.open_stream <turnout.walk.reliable.ReliableProvider.open_stream>` picks the entry and makes
a :class:`ReliableStream`. Iterating its batches opens the stream: until the first batch arrives, a failure is
a failed try like a non-streaming one. With hedging, a stream without visible output after the
hedge delay is raced by the same request on the next eligible entry; nothing reaches the caller before one side
is chosen. Once batches flow, the stream never switches; its attempt is recorded when it ends, and
:meth:`ReliableStream.resume_after` says where a recovery continues when it gave no answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from turnout.core.attribution import Outcome
from turnout.core.classify import error_class_of
from turnout.core.describe import outcome_of
from turnout.core.errors import ResponseTooLarge, StreamingUnsupported
from turnout.core.streams import ResponseBuilder
from turnout.core.types import ChatRequest, Final, StreamEvent, Usage, UsageEvent
from turnout.walk.entry import Candidate, Resume
from turnout.walk.keys import KeyChoice
from turnout.walk.policy import Action, Step
from turnout.walk.walk import Walk, opening

#: Event kinds that are output: the first batch holding one marks the time to first token.
OUTPUT_KINDS = frozenset(("text", "reasoning", "tool_call"))


class _Side:
    """One opened stream of a :class:`ReliableStream`: where it streams from, its key and timings.

    It also holds the batches read ahead of the relay: a hedged stream reads until its first output before it
    is chosen.
    """

    __slots__ = ("ahead", "candidate", "choice", "started", "stats", "t0", "ttft", "upstream", "walk")

    def __init__(
        self,
        walk: Walk,
        candidate: Candidate,
        opened: tuple[tuple[AsyncGenerator[list[StreamEvent], None], list[StreamEvent]], KeyChoice, float, float],
    ) -> None:
        (self.upstream, first), self.choice, self.started, self.t0 = opened
        self.walk = walk
        self.candidate = candidate
        self.ahead = [first]
        stats = walk.context.stats
        self.stats = stats.of(candidate.entry.health_key(candidate.model)) if stats is not None else None
        self.ttft: float | None = None

    def note_output(self, batch: list[StreamEvent]) -> bool:
        """Whether ``batch`` holds output; the first one that does marks the time to first token."""
        if self.ttft is None and any(event.type in OUTPUT_KINDS for event in batch):
            self.ttft = (time.perf_counter() - self.t0) * 1000.0
            if self.stats is not None:
                self.stats.first_token(self.ttft / 1000.0)
        return self.ttft is not None

    def record(self, outcome: Outcome, usage: Usage | None = None, error: BaseException | None = None) -> int:
        """Record the stream's attempt (it ended); the index of the record in its walk's attempts."""
        if self.stats is not None:
            self.stats.finished()
        walk = self.walk
        position = len(walk.attempts)
        walk.record(
            walk.context.attempt(
                self.candidate,
                outcome,
                try_number=walk.try_number,
                choice=self.choice,
                started=self.started,
                elapsed=time.perf_counter() - self.t0,
                usage=usage,
                error=error,
                stream=True,
                ttft_ms=self.ttft,
            )
        )
        return position

    async def fail(self, exc: Exception) -> None:
        """The stream failed: record it, and settle the failure (cooldowns, breakers, rejected keys)."""
        cls = error_class_of(exc)
        self.record(outcome_of(cls), error=exc)
        await self.walk.settle(self.candidate, self.choice, exc, cls, 0)


class ReliableStream:
    """The stream of one entry of a walk (or of a hedge beside it); made by :meth:`ReliableProvider.open_stream`.

    Iterating :meth:`batches` opens the stream. Until its first batch arrives, a failure is a failed try
    like a non-streaming one: recorded, settled by the policy, and retried on this entry (with backoff,
    Retry-After and key rotation) while the policy says so. With a hedge delay, a stream that has shown no
    output after it is raced by the same request on the next eligible entry (:mod:`turnout.walk.hedge`); the first
    to show output is relayed, the other is closed and recorded as ``hedge_lost``. Once batches flow, the
    stream never switches; its attempt is recorded when it ends.

    Attributes:
        entry: The index of the entry in the walk (the hedge's, when the hedge won).
        route: The profile and model it streams from (known for sure once the first batch is relayed).
        delivered: What its consumer collects of the relayed events (a turn's builder), set before the batches are
            iterated: a completed stream whose usage is missing or unusable is billed for the estimate of it
            (:meth:`WalkContext.billed <turnout.walk.context.WalkContext.billed>`). None: the stream collects them
            itself.
    """

    __slots__ = (
        "_candidate",
        "_hedge",
        "_images",
        "_opened",
        "_oversized",
        "_record",
        "_request",
        "_stopped",
        "_temperature",
        "_tries",
        "_verdict",
        "_verdict_usage",
        "_walk",
        "delivered",
        "entry",
        "route",
    )

    def __init__(
        self,
        walk: Walk,
        candidate: Candidate,
        request: ChatRequest,
        temperature: float | None,
        *,
        tries: int | None = None,
        hedge: tuple[float, bool] | None = None,
        images: bool = False,
    ) -> None:
        self._walk = walk
        self._tries = tries if tries is not None else walk.context.tries
        self._candidate = candidate
        self._request = request
        self._temperature = temperature
        self._hedge = hedge  # (delay in seconds, hedge on another key of the same entry)
        self._images = images
        self.entry = candidate.index
        self.route = candidate.entry.route(candidate.model)
        self._opened = False
        self._record: int | None = None  # index of the open stream's attempt in the walk's records
        self._verdict: Outcome | None = None  # the turn's verdict, when given before the attempt was recorded
        self._verdict_usage: Usage | None = None  # and the usage it bills
        self._stopped = False  # the policy stopped the walk on this stream's failure (no recovery)
        self._oversized = False  # the stream failed on its size bound: its entry is not tried again by a recovery
        self.delivered: ResponseBuilder | None = None

    async def batches(self) -> AsyncGenerator[list[StreamEvent], None]:
        """The stream's event batches; its attempts go to the walk's log.

        Raises:
            ProviderError: The stream failed (classified); see :meth:`resume_after`.
            RefusalError / ContextWindowExceeded: The policy stopped the walk before the first batch.
        """
        try:
            side = await (self._race() if self._hedge is not None else self._open(self._walk, self._candidate))
        except Exception:  # the policy stopped the walk (a refusal it does not route, no larger context window)
            self._take_failure()
            raise
        side = self._adopt(side)
        upstream, ahead = side.upstream, side.ahead
        usage: Usage | None = None
        own = ResponseBuilder() if self.delivered is None else None  # no consumer collects the events: collect them
        outcome: Outcome = "cancelled"
        error: Exception | None = None
        try:
            async with aclosing(_after(ahead, upstream)) as batches:  # what a hedged stream read ahead, then the rest
                shown = side.ttft is not None
                async for batch in batches:
                    if not shown:
                        shown = side.note_output(batch)
                    if UsageEvent in map(type, batch):  # a scan in C: most batches are text only
                        usage = next(e for e in reversed(batch) if type(e) is UsageEvent).usage
                    if own is not None:
                        for event in batch:
                            own.add(event)
                    if batch[-1].__class__ is Final:  # Final is always the last event of a stream
                        outcome = "ok"
                        if (closing := side.walk.answered(side.candidate, side.choice)) is not None:
                            await closing
                    yield batch
        except (asyncio.CancelledError, GeneratorExit):
            if outcome != "ok":  # a consumer that stops right after Final still got a complete answer
                outcome = "cancelled"
            raise
        except Exception as exc:
            error = exc
            self._oversized = isinstance(exc, ResponseTooLarge)
            cls = error_class_of(exc)
            outcome = outcome_of(cls)
            walk = side.walk
            action = await walk.settle(side.candidate, side.choice, exc, cls, 0, keep=False)
            self._stopped = action.step is Step.STOP
            raise
        finally:
            self._record = side.record(self._verdict or outcome, self._billed(side, outcome, usage, own), error)
            error = own = self.delivered = None  # the failure goes to the caller; this frame lets go of it (and of
            # what was delivered)

    def _adopt(self, side: _Side | None) -> _Side:
        """The side that opened, which this stream now streams from (its walk, entry and route).

        When no side opened, raises the walk's last failure, or :class:`~turnout.core.errors.StreamingUnsupported` when
        nothing was tried (no usable key).
        """
        failure = self._take_failure()
        if side is None:
            if failure is None:  # no usable key: nothing was tried
                raise StreamingUnsupported("No entry of this route has a usable key right now")
            try:
                raise failure[0]
            finally:
                failure = None  # nor does this frame keep it, which its traceback holds
        side.walk.take_failure()  # a hedge's walk, and an earlier try's failure: opened, not needed
        failure = None
        c = side.candidate
        self._walk, self._candidate, self.entry, self.route = side.walk, c, c.index, c.entry.route(c.model)
        self._opened = True
        return side

    def _billed(self, side: _Side, outcome: Outcome, usage: Usage | None, own: ResponseBuilder | None) -> Usage | None:
        """What the stream's attempt is billed: its verdict's usage, else its own (:meth:`WalkContext.billed`).

        A completed stream (no verdict) is billed its usage, estimated from what was delivered when it is missing or
        unusable; any other is billed the usage it reported, bounded.
        """
        billed, context = self._verdict_usage, side.walk.context
        if billed is None and outcome == "ok" and self._verdict is None:
            delivered = self.delivered if self.delivered is not None else own
            return context.billed(side.candidate.entry, side.candidate.model, self._request, usage, delivered)
        billed = billed if billed is not None else usage
        if billed is None:
            return None
        return context.billed(side.candidate.entry, side.candidate.model, self._request, billed)

    def _take_failure(self) -> tuple[Exception, Action] | None:
        """The walk's last failure, which the walk lets go of; whether it stopped the walk is kept.

        A failure a walk keeps holds, through its traceback, the frame of the walk's tries, which holds the walk: a
        cycle that only the garbage collector would free.
        """
        walk = self._walk
        failure = walk.take_failure()
        self._stopped = walk.stopped
        if failure is not None:
            self._oversized = isinstance(failure[0], ResponseTooLarge)
        return failure

    async def _open(self, walk: Walk, c: Candidate, tries: int | None = None) -> _Side | None:
        """Open ``c``'s stream with the walk's tries (None: every try failed, or no key was usable)."""
        opened = await walk.tries(c, tries or self._tries, opening, self._request, self._temperature, stream=True)
        return _Side(walk, c, opened) if opened is not None else None

    async def _ahead(self, walk: Walk, c: Candidate, tries: int) -> _Side | None:
        """Open ``c``'s stream and read it until its first output (a side of a hedged race)."""
        side = await self._open(walk, c, tries)
        if side is None:
            return None
        try:
            batch = side.ahead[0]
            while not side.note_output(batch) and type(batch[-1]) is not Final:
                batch = await side.upstream.__anext__()
                side.ahead.append(batch)
        except StopAsyncIteration:
            pass  # the relay finds the end of the stream itself
        except asyncio.CancelledError:
            await side.upstream.aclose()
            side.record("hedge_lost" if walk.lost else "cancelled")
            raise
        except Exception as exc:
            await side.upstream.aclose()
            await side.fail(exc)
            return None
        return side

    async def _race(self) -> _Side | None:
        """Open this stream; after the hedge delay without output, race it against the next eligible entry."""
        walk, c = self._walk, self._candidate
        hedging = walk.context.hedging
        assert self._hedge is not None and hedging is not None
        delay, other_keys = self._hedge
        primary: asyncio.Future[_Side | None] = asyncio.ensure_future(self._ahead(walk, c, self._tries))
        races: list[tuple[asyncio.Future[_Side | None], Walk]] = [(primary, walk)]
        winner: _Side | None = None
        try:
            done, _ = await asyncio.wait({primary}, timeout=delay)
            if done:
                winner = primary.result()
                return winner
            target = walk.hedge_target(c.index, self._request, self._images, stream=True, other_keys=other_keys)
            if target is None or not hedging.take():
                winner = await primary
                return winner
            side_walk = walk.side()
            walk.hedge_done(target.index)
            races.append((asyncio.ensure_future(self._ahead(side_walk, target, 1)), side_walk))
            pending = {task for task, _ in races}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    side = task.result()  # a stop (a refusal, no larger context window) ends the walk
                    if side is not None and winner is None:
                        winner = side
                if winner is not None:
                    if winner.walk is not walk:
                        hedging.won += 1
                    else:
                        hedging.kept += 1
                    return winner
            walk.adopt_failure(side_walk)
            return None
        finally:
            for task, task_walk in races:
                if not task.done():
                    task_walk.lose()
                    task.cancel()
            for task, _ in races:
                (outcome,) = await asyncio.gather(task, return_exceptions=True)
                if (
                    isinstance(outcome, _Side) and outcome is not winner
                ):  # opened too, but the other showed output first
                    await outcome.upstream.aclose()
                    outcome.record("hedge_lost")
            if len(races) > 1:
                walk.join(races[1][1])

    def record_verdict(self, outcome: Outcome, usage: Usage | None = None) -> None:
        """The turn's verdict on this stream's attempt: ``cancelled``, ``stream_interrupted`` or ``empty``.

        ``usage`` is what the attempt is billed (None: what it recorded); its cost is priced again from it.
        """
        walk = self._walk
        if self._record is None:
            self._verdict, self._verdict_usage = outcome, usage
            return
        old = walk.attempts[self._record]
        if usage is not None:
            usage = walk.context.billed(self._candidate.entry, old.model, self._request, usage)
        if usage is None or usage == old.usage:
            new = replace(old, outcome=outcome)
        else:
            cost = walk.context.cost(self._candidate.entry, old.model, usage)
            new = replace(old, outcome=outcome, usage=usage, cost_usd=cost)
        walk.amend(self._record, new)

    @property
    def in_flight(self) -> bool:
        """Whether the stream is open and its attempt not recorded yet (it records itself when it ends)."""
        return self._opened and self._record is None

    def resume_after(self, *, failed: bool) -> Resume | None:
        """Where a non-streaming recovery continues after this stream gave no answer; None: no recovery.

        ``failed``: the stream failed (False: it completed semantically empty). A failure the policy
        stopped on (a refusal the profile does not route, a request too large for every entry) is not
        recovered. Otherwise the recovery skips this entry, unless it is the walk's only one (one recovery
        attempt on it); a semantically empty stream gets one recovery attempt on this entry when
        retries are allowed. A stream that failed on its size bound (:class:`~turnout.core.errors.ResponseTooLarge`) is
        evidence about its entry: the recovery never asks that entry again (the same oversized answer would be
        fetched), so with no other entry there is no recovery.
        """
        walk = self._walk
        single = walk.context.single
        if not failed:
            tries = 1 if walk.context.retries > 0 or single else 0
        elif self._stopped or (self._oversized and single):
            return None
        else:
            tries = 1 if single else 0
        return Resume(entry=self.entry, tries=tries, limits=walk.limits)


async def _after(
    ahead: list[list[StreamEvent]], upstream: AsyncGenerator[list[StreamEvent], None]
) -> AsyncGenerator[list[StreamEvent], None]:
    """The batches read ahead, then the rest of ``upstream`` (closed when the consumer stops)."""
    async with aclosing(upstream):
        for batch in ahead:
            yield batch
        async for batch in upstream:
            yield batch
