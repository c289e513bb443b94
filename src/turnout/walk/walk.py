"""One walk over a route's entries: which it tries now, its tries on one entry, and what it learned on the way.

A :class:`Walk` is made per call (and per stream): it records every attempt in the call's log, decides which
entries are tried now (capabilities, cooldowns, circuit breakers, context windows), makes the tries on one
entry (key choice, backoff), settles each failure (:func:`turnout.walk.policy.decide`, then the state it names:
cooldowns, breakers, rejected keys), records and prices each attempt, and knows the entries to try as if closed
when every entry was unavailable (the panic rule). What it reaches beyond its call (entries, state, breakers,
clock, backoff, prices) comes from its :class:`~turnout.walk.context.WalkContext`; the reliable provider orders
the entries, starts walks and runs hedges, and the reliable stream opens its stream through one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from enum import Enum
from typing import TypeVar

from turnout.core.attribution import Attempt, DispatchScope, Outcome
from turnout.core.classify import error_class_of, is_dead_key_error
from turnout.core.describe import KEYS_COOLING, NO_LIVE_KEY, PROBE_TAKEN, outcome_of
from turnout.core.errors import (
    ContextWindowExceeded,
    EmptyCompletion,
    ErrorClass,
    InvalidRequest,
    ProtocolError,
    ProviderError,
    RefusalError,
    ResponseTooLarge,
)
from turnout.core.estimate import opening_usage, unseen_usage
from turnout.core.provider import Provider, chat_using_tools
from turnout.core.types import ChatRequest, ChatResponse, StreamEvent, can_serve
from turnout.state.pins import Pin
from turnout.walk.context import WalkContext
from turnout.walk.entry import Candidate, ContextLimits, Served
from turnout.walk.keys import KeyChoice
from turnout.walk.policy import Action, Position, Step, decide
from turnout.walk.stats import EntryStats

#: The longest a backoff grows (it doubles after each sleep).
MAX_BACKOFF_S = 10.0

T = TypeVar("T")
#: What one try sends: a chat request, or another kind of request (an embedding batch) its ``call`` knows.
R = TypeVar("R")

_walk_numbers = itertools.count(1)


def answer_of(
    provider: Provider, request: ChatRequest, model: str, temperature: float | None
) -> Awaitable[ChatResponse]:
    """One non-streaming try: the adapter's answer (a plain function: no coroutine of its own around the call)."""
    if request.tools:
        return chat_using_tools(provider, request, model, temperature)
    return provider.chat(request, model, temperature)


def refuse_empty(response: ChatResponse) -> None:
    """An empty answer is a failed try."""
    if response.is_semantically_empty:
        raise EmptyCompletion(usage=response.usage)


def _ended(stats: EntryStats | None, t0: float) -> float:
    """A try that started at perf counter ``t0`` ended: its elapsed time; it is no longer counted in flight."""
    elapsed = time.perf_counter() - t0
    if stats is not None:
        stats.finished()
    return elapsed


async def opening(
    provider: Provider, request: ChatRequest, model: str, temperature: float | None
) -> tuple[AsyncGenerator[list[StreamEvent], None], list[StreamEvent]]:
    """One streaming try: open the adapter's stream and wait for its first batch."""
    gen = provider.stream_batches(request, model, temperature)
    try:
        return gen, await gen.__anext__()
    except StopAsyncIteration:
        raise ProtocolError("the stream ended before its first event") from None
    except BaseException:
        await gen.aclose()
        raise


class Admission(Enum):
    """Whether a walk tries an entry now."""

    TRY = "try"
    SKIP = "skip"
    PROBE = "probe"
    """Its circuit breaker is half-open: the walk may try it once if it takes the probe."""


class Walk:
    """The progress of one walk: its attempts, what context-window failures taught it, and the last failure.

    Args:
        context: What the route's walks share (entries, state, breakers, clock, backoff, prices).
        log: The call's dispatch scope, where every attempt is recorded too (None: the walk's own list only).
        requested: The caller's model.
        limits: What earlier context-window failures taught the call (None: nothing yet).
        order: The entries' indices in the order this walk tries them (a pool's members arranged for this call).
        conversation: The call's conversation (:func:`~turnout.walk.affinity.conversation_key`; None: no affinity).
        pin: Where that conversation was served last (None: nowhere known).
    """

    __slots__ = (
        "_last_failure",
        "_lost",
        "_probing",
        "_witness",
        "attempts",
        "context",
        "conversation",
        "hedged",
        "limits",
        "log",
        "order",
        "panic",
        "pin",
        "reached",
        "requested",
        "stopped",
        "tried",
        "try_number",
        "unavailable",
    )

    def __init__(
        self,
        context: WalkContext,
        log: DispatchScope | None,
        requested: str,
        limits: ContextLimits | None,
        order: Sequence[int],
        conversation: str | None = None,
        pin: Pin | None = None,
    ) -> None:
        self.context = context
        self.log = log
        self.requested = requested
        self.limits = limits
        self.order = order
        self.conversation = conversation
        self.pin = pin
        self.attempts: list[Attempt] = []
        self._last_failure: tuple[Exception, Action] | None = None  # :attr:`last_failure`
        #: The policy stopped the walk (a refusal it does not route, no larger context window).
        self.stopped = False
        #: The try number of the last try (1-based).
        self.try_number = 0
        self._witness: str | None = None  # :attr:`witness`, made when a key is reported (rarely)
        #: Whether some entry was tried (called, or found without a usable key).
        self.tried = False
        self._probing = False  # :attr:`probing`
        #: Every entry was unavailable: the walk tries them all as if closed (:meth:`panic_order`).
        self.panic = False
        #: When the walk's tries on its current entry began (the call reached it: a breaker's run counts a failed
        #: call only if it reached the entry after the entry's last answer).
        self.reached = 0.0
        self._lost = False  # :meth:`lose`
        #: Entries already tried as a hedge (the walk does not try them again).
        self.hedged: set[int] | None = None
        #: ``(since, index, breaker, when)`` of each entry skipped because it was cooling down or its breaker was open
        #: (``since`` None: a cooldown skip).
        self.unavailable: list[tuple[float | None, int, bool, float]] | None = None

    @property
    def witness(self) -> str:
        """What tells this walk's call from others (a key dies only when two calls agree it was rejected)."""
        witness = self._witness
        if witness is None:
            log = self.log
            witness = self._witness = log.call_id if log is not None and log.call_id else f"walk-{next(_walk_numbers)}"
        return witness

    @property
    def probing(self) -> bool:
        """Whether the current try probes a half-open circuit breaker (the walk took its probe: :meth:`probe`)."""
        return self._probing

    @property
    def last_failure(self) -> tuple[Exception, Action] | None:
        """The failure that ended the last entry's tries, and what the policy made of it (:meth:`settle`)."""
        return self._last_failure

    def take_failure(self) -> tuple[Exception, Action] | None:
        """The last failure, which the walk lets go of.

        Its traceback holds the frame of :meth:`tries`, which holds the walk: a cycle only the garbage collector frees.
        """
        failure, self._last_failure = self._last_failure, None
        return failure

    def adopt_failure(self, other: Walk) -> None:
        """Keep ``other``'s last failure when this walk has none (a hedge's walk beside this one)."""
        if self._last_failure is None:
            self._last_failure = other._last_failure

    @property
    def lost(self) -> bool:
        """Whether this walk's try lost a hedged race (:meth:`lose`)."""
        return self._lost

    def lose(self) -> None:
        """This walk's try lost a hedged race: its cancellation is recorded as ``hedge_lost``, not ``cancelled``."""
        self._lost = True

    def join(self, side: Walk) -> None:
        """Keep the attempts of a hedge's walk beside this one (they are in the call's log already)."""
        self.attempts.extend(side.attempts)

    def candidate(self, i: int) -> Candidate:
        """Entry ``i`` as this walk sends it: with its pin, else the caller's model."""
        entry = self.context.entries[i]
        return Candidate(i, entry, entry.model if entry.model is not None else self.requested)

    def hedge_done(self, i: int) -> None:
        """Entry ``i`` was tried as a hedge: the walk does not try it again."""
        if self.hedged is None:
            self.hedged = set()
        self.hedged.add(i)

    def side(self) -> Walk:
        """A walk for a hedge beside this one: the same call (log, witness, order, context knowledge)."""
        side = Walk(self.context, self.log, self.requested, self.limits, self.order, self.conversation)
        side._witness = self.witness
        return side

    def answered(self, c: Candidate, choice: KeyChoice) -> Awaitable[None] | None:
        """``c`` gave this walk's answer with ``choice``: the conversation is pinned there, the entry is healthy.

        Returns what :meth:`healthy` returns: the closing of a probed breaker to await, or None.
        """
        conversation = self.conversation
        if conversation is not None and (affinity := self.context.affinity) is not None:
            affinity.served(conversation, c.entry.profile, choice.index, self.pin)
        return self.healthy(c)

    async def served(
        self, c: Candidate, done: tuple[ChatResponse, KeyChoice, float, float], request: ChatRequest
    ) -> Served:
        """``c`` answered ``request`` (``done``, from :meth:`tries`): its attempt recorded and priced; the answer.

        The attempt is billed what :meth:`WalkContext.billed` makes of the answer's usage (estimated when missing or
        unusable, bounded by what the request allowed); the answer keeps the usage its provider reported. The entry
        is healthy (:meth:`answered`): a probed breaker is closed before the answer is returned.
        """
        response, choice, started, t0 = done
        # A failure an earlier try kept holds, through its traceback, the frame of the walk's tries, which holds the
        # walk: a reference cycle that only the garbage collector would free. Served, the walk needs it no more.
        self._last_failure = None
        self.record(
            self.context.attempt(
                c,
                "ok",
                try_number=self.try_number,
                choice=choice,
                started=started,
                elapsed=time.perf_counter() - t0,
                usage=self.context.billed(c.entry, c.model, request, response.usage, response),
            )
        )
        closing = self.answered(c, choice)
        if closing is not None:
            await closing
        return Served(response, c.entry.route(c.model), c.index)

    def record(self, attempt: Attempt) -> None:
        """Keep one attempt, in the walk and in the call's log."""
        self.attempts.append(attempt)
        if self.log is not None:
            self.log.attempts.append(attempt)

    def amend(self, position: int, attempt: Attempt) -> None:
        """Put ``attempt`` in place of the record at ``position``, in the walk and in the call's log.

        A stream's record is amended so when the turn's verdict on it comes after it was recorded.
        """
        old = self.attempts[position]
        self.attempts[position] = attempt
        log = self.log
        if log is not None:
            for n in range(len(log.attempts) - 1, -1, -1):
                if log.attempts[n] is old:
                    log.attempts[n] = attempt
                    break

    def admits(self, c: Candidate, request: ChatRequest, images: bool, *, stream: bool) -> Admission:
        """Whether the walk tries ``c`` now; an entry cooling down or behind an open breaker is recorded."""
        if not self.capable(c, request, images, stream=stream):
            return Admission.SKIP
        return self.availability(c, stream)

    def availability(self, c: Candidate, stream: bool) -> Admission:
        """Whether ``c`` may be tried now, whatever the request asks: its cooldowns and its breaker."""
        context = self.context
        store = context.store
        if context.single:
            return Admission.TRY
        now = context.env.clock()
        until = context.cooling_until(c.entry, now)
        if until is not None:
            self._unavailable(c, "cooldown_skip", now, until, None, stream)
            return Admission.SKIP
        if context.breakers is not None:
            record = store.breaker(c.entry.health_key(c.model))
            if record is not None:  # open, or half-open once its interval is over
                if now >= record.until:
                    return Admission.PROBE
                self._unavailable(c, "breaker_skip", now, record.until, record.opened_at, stream)
                return Admission.SKIP
        return Admission.TRY

    def capable(self, c: Candidate, request: ChatRequest, images: bool, *, stream: bool) -> bool:
        """Whether ``c`` can take the request at all (its capabilities, a context window known to be too small)."""
        entry, model = c.entry, c.model
        special = request.response_format is not None or request.native is not None
        if stream or images or special:
            caps = entry.capabilities(model)
            if images and not caps.vision:
                return False
            if special and not can_serve(caps, request):
                return False
            if stream and (not caps.streaming or (request.tools and not caps.streaming_tool_events)):
                return False
            if stream and entry.keys.all_dead():
                return False
        limits = self.limits
        return limits is None or not limits.too_small(entry, model, self.context.context_window(entry, model))

    def hedge_target(
        self, i: int, request: ChatRequest, images: bool, *, stream: bool, other_keys: bool
    ) -> Candidate | None:
        """Where a hedge of entry ``i`` goes.

        The next entry that is available now (no cooldown, a closed breaker, a usable key), else, with
        ``other_keys``, entry ``i`` itself when its pool has another usable key.
        """
        context = self.context
        now = context.env.clock()
        order = self.order
        for j in order[order.index(i) + 1 :]:
            c = self.candidate(j)
            if not self.capable(c, request, images, stream=stream):
                continue
            if context.cooling_until(c.entry, now) is not None or not c.entry.keys.has_usable(now):
                continue
            if context.breakers is not None and context.store.breaker(c.entry.health_key(c.model)) is not None:
                continue  # open or half-open: a hedge is no probe
            return c
        keys = context.entries[i].keys
        if other_keys and keys.rotates and keys.has_usable(now):
            return self.candidate(i)
        return None

    async def probe(self, c: Candidate) -> bool:
        """Take the probe of ``c``'s half-open breaker (the try after it is the probe); else skip it."""
        context = self.context
        assert context.breakers is not None
        key = c.entry.health_key(c.model)
        now = context.env.clock()
        if await context.breakers.claim_probe(key, now):
            self._probing = True
            return True
        record = context.store.breaker(key)
        since = record.opened_at if record is not None else now
        self._unavailable(c, "breaker_skip", now, now, since, stream=False, detail=PROBE_TAKEN)
        return False

    def _unavailable(
        self,
        c: Candidate,
        outcome: Outcome,
        now: float,
        until: float,
        since: float | None,
        stream: bool,
        detail: str | None = None,
    ) -> None:
        """Record ``c`` as skipped until ``until``, unavailable since ``since`` (None: its cooldown's start)."""
        self.record(
            self.context.attempt(
                c,
                outcome,
                try_number=0,
                started=now,
                retry_after=until - now,
                detail=detail,
                stream=stream,
            )
        )
        if self.unavailable is None:
            self.unavailable = []
        self.unavailable.append((since, c.index, outcome == "breaker_skip", now))

    def panic_order(self) -> list[int]:
        """The entries to try as if closed when every entry the walk considered was unavailable (the panic rule).

        Empty when some entry was tried, or none was skipped for being unavailable. Otherwise every entry skipped
        for a cooldown or an open breaker, in the walk's order, each to be tried with its normal tries: the
        breakers' learning never costs a call the chain could serve, and a walk never fails without trying. A
        breaker's entry that serves such a call is closed (:meth:`healthy`).
        """
        if self.tried or not self.unavailable:
            return []
        self.panic = True
        seen: set[int] = set()
        out = []
        for _, i, _, _ in self.unavailable:
            if i not in seen:
                seen.add(i)
                out.append(i)
        position = {i: n for n, i in enumerate(self.order)}
        out.sort(key=lambda i: position.get(i, len(position)))
        return out

    def usable_at(self) -> float | None:
        """When the walk failed: the earliest moment one of its entries is usable again, if none is usable now.

        Over the entries the walk tried or skipped as unavailable: the end of a cooldown (the profile's, or the
        soonest key of a pool whose every live key cools down) or of an open breaker's interval. None when one of
        them is usable now (nothing to wait for: a retry may be served) or the walk considered none.
        """
        context = self.context
        store = context.store
        now = context.env.clock()
        considered = {a.entry for a in self.attempts}
        if not considered:
            return None
        soonest: float | None = None
        for i in considered:
            entry = context.entries[i]
            until = context.cooling_until(entry, now)
            if until is None and context.breakers is not None:
                record = store.breaker(entry.health_key(entry.model_for(self.requested)))
                if record is not None and record.until > now:
                    until = record.until
            if until is None:
                return None
            soonest = until if soonest is None else min(soonest, until)
        return soonest

    def healthy(self, c: Candidate) -> Awaitable[None] | None:
        """``c`` answered: its failure streak ends, and a probe's success closes its breaker.

        Returns the closing of the breaker to await (None: nothing to wait for, the common case, which then costs
        no coroutine).
        """
        context = self.context
        breakers = context.breakers
        if breakers is None:
            return None
        key = c.entry.health_key(c.model)
        if self._probing:
            self._probing = False
            return breakers.succeeded(key, context.env.clock(), probing=True)
        if self.panic and context.store.breaker(key) is not None:
            return breakers.succeeded(key, context.env.clock(), probing=False)  # it served
        if breakers.streaks:  # an entry without a streak has none to end
            breakers.streak_ends(key, context.env.clock())
        return None

    def larger_entry_remains(self, failed: int) -> bool:
        """Whether an entry after ``failed`` (in this walk's order) is not known to be too small."""
        context = self.context
        limits = self.limits
        order = self.order
        for e in (context.entries[i] for i in order[order.index(failed) + 1 :]):
            model = e.model_for(self.requested)
            if limits is None or not limits.too_small(e, model, context.context_window(e, model)):
                return True
        return False

    async def tries(
        self,
        c: Candidate,
        tries: int,
        call: Callable[[Provider, R, str, float | None], Awaitable[T]],
        request: R,
        temperature: float | None,
        *,
        check: Callable[[T], None] | None = None,
        stream: bool = False,
    ) -> tuple[T, KeyChoice, float, float] | None:
        """Try ``c`` up to ``tries`` times with ``call``: ``(result, key, start, perf counter)`` of the success.

        Each failure is recorded, then settled by the policy: a retry sleeps the backoff first, a key
        switch retries at once, a move on returns None (:attr:`last_failure` says why; a probe taken is over), and a
        stop raises.
        An :class:`~turnout.core.errors.InvalidRequest` (the adapter could not build or encode the request: nothing
        was sent) is raised at once, neither recorded as an attempt nor settled.
        """
        context = self.context
        backoff = context.base_backoff
        self.tried = True
        stats = context.stats.of(c.entry.health_key(c.model)) if context.stats is not None else None
        for t in range(1, tries + 1):
            if self.log is not None and self.log.abandoned:  # the caller gave up: no try after the one under way
                break
            begun = self._begin(c, t, stream, stats)
            if begun is None:
                break
            choice, started, t0 = begun
            try:
                result = await call(c.entry.providers[choice.index], request, c.model, temperature)
                if check is not None:
                    check(result)
            except asyncio.CancelledError:
                elapsed = _ended(stats, t0)
                self.record(self._abandoned(c, request, choice, t, started, elapsed, stream))
                raise
            except InvalidRequest:  # nothing was sent: the caller's error, no provider failure to record or settle
                if stats is not None:
                    stats.finished()
                raise
            except Exception as exc:  # every failure is classified; nothing escapes unrecorded
                elapsed = _ended(stats, t0)
                after = await self._failed(c, request, choice, exc, t, tries - t, started, elapsed, stream, backoff)
                if after is None:  # the walk moves on
                    break
                backoff = after
                continue
            if stats is not None and not stream:  # a stream's try is under way until the stream ends
                stats.finished()
                stats.first_token(time.perf_counter() - t0)
            return result, choice, started, t0
        self._probing = False  # moving on: a probe taken here is over
        return None

    def _begin(
        self, c: Candidate, t: int, stream: bool, stats: EntryStats | None
    ) -> tuple[KeyChoice, float, float] | None:
        """Start try ``t`` on ``c``: its key, start time and perf counter (None: no usable key, recorded as such).

        The key the call's conversation is pinned to on this entry's member is taken first while it is usable. A
        started try is counted in flight in ``stats``.
        """
        self.try_number = t
        started = self.context.env.clock()
        if t == 1:
            self.reached = started
        pin = self.pin
        entry = c.entry
        choice = entry.keys.pick(started, pin.key if pin is not None and pin.member == entry.profile else None)
        if choice is None:
            self.record(self._no_key(c, stream))
            return None
        t0 = time.perf_counter()
        if stats is not None:
            stats.started()
        return choice, started, t0

    def _abandoned(
        self,
        c: Candidate,
        request: object,
        choice: KeyChoice,
        t: int,
        started: float,
        elapsed: float,
        stream: bool,
    ) -> Attempt:
        """The record of try ``t``, cancelled (or, in a hedged race, lost) while it was under way.

        An abandoned call is billed (estimated): a stream not yet open for its input, a whole call for the most it
        could generate, since the provider bills what it generated and none of it was seen.
        """
        billed = (
            None
            if self._lost or not isinstance(request, ChatRequest)  # an embedding batch: billed by its reply
            else (opening_usage(request) if stream else unseen_usage(request, c.entry.max_tokens))
        )
        return self.context.attempt(
            c,
            "hedge_lost" if self._lost else "cancelled",
            try_number=t,
            choice=choice,
            started=started,
            elapsed=elapsed,
            stream=stream,
            usage=billed,
        )

    async def _failed(
        self,
        c: Candidate,
        request: object,
        choice: KeyChoice,
        exc: Exception,
        t: int,
        tries_left: int,
        started: float,
        elapsed: float,
        stream: bool,
        backoff: float,
    ) -> float | None:
        """Try ``t`` failed with ``exc``: the backoff of the next try, or None when the walk moves on.

        The attempt is recorded (an empty answer's usage billed, bounded by what the request allowed) and the
        failure settled (:meth:`settle`), then acted on: a retry first sleeps ``backoff`` (jittered, raised to the
        provider's Retry-After) and doubles it, a key switch retries at once, and a stop raises (:meth:`stop`).
        """
        cls = error_class_of(exc)
        usage = exc.usage if isinstance(exc, EmptyCompletion) else None
        if usage is not None and isinstance(request, ChatRequest):
            usage = self.context.billed(c.entry, c.model, request, usage)
        self.record(
            self.context.attempt(
                c,
                outcome_of(cls),
                try_number=t,
                choice=choice,
                started=started,
                elapsed=elapsed,
                usage=usage,
                error=exc,
                stream=stream,
            )
        )
        action = await self.settle(c, choice, exc, cls, tries_left)
        step = action.step
        if step is Step.NEXT_ENTRY:  # the usual step first
            return None
        if step is Step.RETRY:
            context = self.context
            hint = exc.retry_after if isinstance(exc, ProviderError) else None
            await context.env.sleep(context.backoff_sleep(backoff, hint))
            return min(backoff * 2, MAX_BACKOFF_S)
        if step is Step.STOP:
            try:
                self.stop(exc)
            finally:
                del exc  # nor does this frame keep it, which the traceback holds
        return backoff  # a key switch: the next try at once

    async def settle(
        self, c: Candidate, choice: KeyChoice, exc: Exception, cls: ErrorClass, tries_left: int, *, keep: bool = True
    ) -> Action:
        """Decide what follows a failure of class ``cls`` (:meth:`decide_failure`); update the state it names.

        With ``keep``, the failure and the action are kept as :attr:`last_failure` (a stream that failed after its
        first batch passes False: its failure goes to the caller, and the walk keeps no reference to it).
        """
        action = self.decide_failure(c, choice, exc, cls, tries_left)
        hint = exc.retry_after if isinstance(exc, ProviderError) else None
        await self.apply(c, choice.key_id, action, hint)
        if keep:
            self._last_failure = (exc, action)
        return action

    def decide_failure(
        self, c: Candidate, choice: KeyChoice, exc: Exception, cls: ErrorClass, tries_left: int
    ) -> Action:
        """What follows a failure of class ``cls`` on ``c`` (:func:`turnout.walk.policy.decide`).

        A context-window failure is kept in :attr:`limits` first: the policy asks whether a larger entry remains.
        """
        context = self.context
        entry = c.entry
        pool = entry.keys
        larger = False
        if cls is ErrorClass.CONTEXT_WINDOW:
            if self.limits is None:
                self.limits = ContextLimits()
            self.limits.failed(entry, c.model, context.context_window(entry, c.model))
            larger = self.larger_entry_remains(c.index)
        rotates = pool.rotates
        now = context.env.clock() if rotates else 0.0  # for a pool's other keys only (:meth:`apply` reads its own)
        auth = is_dead_key_error(exc)
        replay = not isinstance(exc, ResponseTooLarge)  # the next try would fetch the same oversized answer
        return decide(
            cls,
            Position(
                tries_left,
                c.index == self.order[-1],
                context.single,
                rotates,
                rotates and pool.other_usable(choice.index, now),
                rotates and pool.other_live(choice.index, now),
                entry.refusal_fallback,
                larger,
                self._probing,
            ),
            auth_failure=auth,
            replay=replay,
        )

    async def apply(self, c: Candidate, kid: str | None, action: Action, hint: float | None) -> None:
        """Apply what :meth:`decide_failure` decided: count the failure towards the breaker, cool down, report a key."""
        context = self.context
        now = context.env.clock()
        breakers = context.breakers
        unhealthy = action.health and action.step is Step.NEXT_ENTRY  # the call's one signal: it leaves the entry
        entry = c.entry
        if breakers is not None and (unhealthy or self._probing):
            key = entry.health_key(c.model)
            if unhealthy:
                await breakers.failed(entry.profile, key, now, probing=self._probing, reached=self.reached)
                self._probing = False
            elif not action.health:  # the probe was answered, if not as asked (a 400, a 429): the entry is reachable
                await breakers.succeeded(key, now, probing=True)
                self._probing = False
        pool = entry.keys
        cool = context.cool_down
        if action.cool_key and kid is not None and (write := cool(pool.key_cooldown(kid), hint)) is not None:
            await write
        if action.cool_profile and (write := cool(entry.profile, hint)) is not None:
            await write
        if action.report_key and kid is not None:
            await pool.report_auth_failure(kid, witness=self.witness)

    def stop(self, exc: Exception) -> None:
        """End the walk with ``exc``: a refusal as it is, a context-window failure as ``ContextWindowExceeded``.

        The walk lets go of the failure (its traceback holds the frame of :meth:`tries`, which holds the walk: a
        cycle that only the garbage collector would free) and keeps that it stopped.
        """
        self.stopped = True
        self._last_failure = None
        try:
            if isinstance(exc, RefusalError):
                exc.attempts = tuple(self.attempts)
                raise exc
            limit = self.limits.limit if self.limits else None
            raise ContextWindowExceeded(limit=limit, attempts=self.attempts) from exc
        finally:
            del exc  # nor does this frame keep it, which the traceback holds

    def _no_key(self, c: Candidate, stream: bool) -> Attempt:
        """The record of ``c`` found without a usable key: every key dead, or every live one cooling down."""
        context = self.context
        now = context.env.clock()
        keys = c.entry.keys
        if keys.all_dead():
            return context.attempt(c, "non_retryable", try_number=0, started=now, detail=NO_LIVE_KEY, stream=stream)
        free = keys.soonest_key_free(now)
        return context.attempt(
            c,
            "cooldown_skip",
            try_number=0,
            started=now,
            retry_after=(free - now) if free is not None else None,
            detail=KEYS_COOLING,
            stream=stream,
        )
