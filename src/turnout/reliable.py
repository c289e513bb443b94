"""The reliable walk: the entries of one route, tried in order with retries, backoff and key rotation.

:class:`ReliableProvider` implements the provider contract, so routers and clients compose it like any
other provider. It answers in two ways:

- :meth:`ReliableProvider.run` walks the entries for one complete answer (SPEC 6) and returns it with the
  entry that produced it (:class:`Served`);
- :meth:`ReliableProvider.open_stream` picks the first entry that can stream the request and returns a
  :class:`ReliableStream`: its batches come from that entry only, and a failure before the first batch
  is retried on that entry like a non-streaming try (SPEC 6.7, 7.1). Whether a failed stream is recovered
  is the streaming runtime's decision (:mod:`turnout.runtime`); :meth:`ReliableStream.resume_after`
  says where such a recovery continues, and :meth:`run` takes it as ``resume``.

What a failure means comes from :mod:`turnout.classify`; what the walk does about it comes from
:func:`turnout.policy.decide`, for both forms, and is applied in one place (:meth:`ReliableProvider._settle`).
Every attempt is recorded in the call's :class:`~turnout.attribution.DispatchScope`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import replace

from turnout.affinity import Affinity
from turnout.attribution import Attempt, DispatchScope, Outcome, current_scope, new_attempt
from turnout.classify import is_dead_key_error
from turnout.entry import ContextLimits, Entry, PoolOrder, Resume, Served, has_images, new_served, pool_blocks
from turnout.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    ErrorClass,
    ProviderError,
    ResponseTooLarge,
    StreamingUnsupported,
    UnsupportedRequest,
)
from turnout.health import Breakers
from turnout.hedge import Hedging
from turnout.keys import KeyChoice, KeyPool
from turnout.policy import Action, Position, Step, decide
from turnout.pricing import Catalogue, default_catalogue
from turnout.provider import Provider, flatten
from turnout.reliable_stream import ReliableStream
from turnout.report import aggregate_message, error_detail, failure_reason
from turnout.state import MemoryStore, StateStore
from turnout.state.pins import Pin
from turnout.stats import Stats
from turnout.types import Capabilities, ChatRequest, ChatResponse, StreamEvent, Usage, can_serve, unservable_reason
from turnout.walk import PROBE, SKIP, TRY, Walk, answer_of, asks_capabilities, refuse_empty

MIN_BACKOFF_S = 0.05
MAX_RETRY_AFTER_S = 30.0
MAX_COOLDOWN_S = 60.0
DEFAULT_COOLDOWN_S = 10.0

_tuple_new = tuple.__new__
#: A global: reading a member off its enum class costs about 900 instructions on CPython 3.11 (see ``walk.TRY``).
_CONTEXT_WINDOW = ErrorClass.CONTEXT_WINDOW
_NEXT_ENTRY_STEP = Step.NEXT_ENTRY


def cooldown_seconds(hint: float | None) -> float:
    """How long a cooldown for a retry hint lasts: the hint (capped at 60 s), else 10 s (0 or less: none at all)."""
    return min(hint, MAX_COOLDOWN_S) if hint is not None else DEFAULT_COOLDOWN_S


__all__ = ["ContextLimits", "Entry", "PoolOrder", "ReliableProvider", "ReliableStream", "Resume", "Served"]


def _healthy(member: str) -> bool:
    """Every pool member is healthy (the store is calm)."""
    return True


class ReliableProvider(Provider):
    """Walks the entries of one route with retries, backoff, cooldowns and key rotation.

    Args:
        entries: The materialised order.
        provider_retries: Retries per entry (each entry is tried ``provider_retries + 1`` times).
        provider_backoff_ms: The first backoff (floored at 50 ms; doubles per sleep; capped at 10 s).
        store: Cooldown and key state (default: in memory).
        catalogue: Prices and context windows when a profile does not set them.
        clock: Wall clock in seconds (cooldown deadlines, attempt start times).
        sleep: The sleep function (tests inject a fake that advances a fake clock).
        jitter: A uniform random number in [0, 1) (each backoff keeps at least half its length).
        name: A label for logs.
        breakers: The entries' circuit breakers (None: none; the factory passes the client's, shared by every
            walk, so an entry's health is learned whichever route reaches it).
        stats: Calls in flight and times to first token per entry, for pools and hedging (None: not kept).
        hedging: Hedged requests (None: no hedging; see :mod:`turnout.hedge`).
        affinity: Conversations' pins to pool members (None: pools order every call by their strategy alone; see
            :mod:`turnout.affinity`).
    """

    def __init__(
        self,
        entries: Sequence[Entry],
        *,
        provider_retries: int = 2,
        provider_backoff_ms: int = 500,
        store: StateStore | None = None,
        catalogue: Catalogue | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        name: str = "reliable",
        breakers: Breakers | None = None,
        stats: Stats | None = None,
        hedging: Hedging | None = None,
        affinity: Affinity | None = None,
    ) -> None:
        if not entries:
            raise ValueError("a reliable provider needs at least one entry")
        self.entries = tuple(entries)
        #: The route has one entry (it never skips one: read on every walk).
        self.single = len(self.entries) == 1
        self.tries = provider_retries + 1
        self.retries = provider_retries
        self.base_backoff = max(provider_backoff_ms / 1000.0, MIN_BACKOFF_S)
        self.store = store if store is not None else MemoryStore()
        self.catalogue = catalogue if catalogue is not None else default_catalogue()
        self.clock = clock
        self.sleep = sleep
        self.jitter = jitter
        self.name = name
        self.breakers = breakers
        self.stats = stats
        self.hedging = hedging if hedging is not None and hedging.enabled else None
        self._vision: dict[str, bool] = {}
        #: The entries' indices in configured order, and whether some run of them stands for a pool.
        self.entry_order = tuple(range(len(self.entries)))
        self._blocks = pool_blocks(self.entries)
        self.pooled = self._blocks is not None
        #: Pins of conversations to members, kept only when some pool leads or falls back here.
        self.affinity = affinity if self.pooled else None

    # --- what the route can do ----------------------------------------------------------------

    def capabilities(self, model: str | None = None) -> Capabilities:
        """The first entry's capabilities; vision and native tools only if every entry has them."""
        caps = [e.capabilities(model) for e in self.entries]
        return replace(
            caps[0],
            native_tools=all(c.native_tools for c in caps),
            vision=all(c.vision for c in caps),
            streaming=any(c.streaming for c in caps),
            streaming_tool_events=any(c.streaming_tool_events for c in caps),
        )

    async def aclose(self) -> None:
        """Close every adapter (they share one session; closing it twice is harmless)."""
        for entry in self.entries:
            for provider in entry.providers:
                await provider.aclose()

    def visit_order(self, pin: Pin | None = None, requested: str = "", *, keyed: bool = False) -> Sequence[int]:
        """The entries' indices in the order one call tries them: each pool's members arranged by the pool.

        With ``keyed`` (the call's conversation is known), the affinity puts the conversation's ``pin`` first
        while it is healthy, and keeps new conversations off a member beyond its share (:mod:`turnout.affinity`).
        """
        blocks = self._blocks
        if blocks is None:
            return self.entry_order
        affinity = self.affinity if keyed else None
        out: list[int] = []
        for indices, pool in blocks:
            if pool is None:
                out.extend(indices)
                continue
            by_member: dict[str, list[int]] = {}
            for i in indices:
                by_member.setdefault(self.entries[i].profile, []).append(i)
            members = pool.arrange(list(by_member), self.stats)
            if affinity is not None:
                if self.store.calm():  # nothing cools down, no breaker is open: every member is healthy
                    healthy: Callable[[str], bool] = _healthy
                else:
                    first = {m: self.entries[found[0]] for m, found in by_member.items()}
                    healthy = functools.partial(self._ready, first, requested, self.clock())
                members = affinity.arrange(members, pin, healthy, pool.weights)
            for member in members:
                out.extend(by_member[member])
        return out

    def _ready(self, first: dict[str, Entry], requested: str, now: float, member: str) -> bool:
        """Whether pool ``member`` (its first entry in ``first``) is neither cooling down nor behind an open breaker."""
        entry = first[member]
        if self.cooling_until(entry, now) is not None:
            return False
        return self.store.breaker(entry.health_key(entry.served_model(requested))) is None

    def context_window(self, entry: Entry, model: str) -> int | None:
        """The entry's context window: the profile's setting, else the catalogue's, else None."""
        if entry.context_window is not None:
            return entry.context_window
        return self.catalogue.context_window(entry.family, model)

    def cost(self, entry: Entry, model: str, usage: Usage | None) -> float | None:
        """The cost of ``usage`` on this entry, or None when the price is unknown."""
        if usage is None:
            return None
        rates = entry.rates
        if rates is None:  # the catalogue's, kept on the entry for the model it last priced
            priced = entry.priced
            if priced is None or priced[0] != model:
                priced = entry.priced = (model, self.catalogue.rates(entry.family, model))
            rates = priced[1]
        return rates.cost(usage) if rates is not None else None

    def may_hold_images(self, request: ChatRequest, model: str) -> bool:
        """Whether ``request`` has images and some entry does not accept them for ``model``.

        When every entry accepts images, a request's images change nothing about the walk, so its messages
        are not scanned (the answer per model is kept: capabilities are fixed at construction).
        """
        every = self._vision.get(model)
        if every is None:
            if len(self._vision) > 64:
                self._vision.clear()
            every = self._vision[model] = all(e.capabilities(model).vision for e in self.entries)
        return not every and has_images(request.messages)

    def cooling_until(self, entry: Entry, now: float) -> float | None:
        """When the entry's profile stops cooling down (profile cooldown, or every live key cooling)."""
        until = self.store.cooldown_until(entry.profile, now)
        if until is not None:
            return until
        return self.keys_cooling_until(entry.keys, now)

    @staticmethod
    def keys_cooling_until(pool: KeyPool, now: float) -> float | None:
        """When the first key of a pool whose every live key is cooling down is free again (None: one is usable)."""
        if pool.rotates and not pool.all_dead() and not pool.has_usable(now):
            return pool.soonest_key_free(now)
        return None

    def backoff_sleep(self, backoff: float, hint: float | None) -> float:
        """A jittered backoff (at least half of it), raised to the Retry-After hint (capped at 30 s)."""
        wait = backoff * (0.5 + 0.5 * self.jitter())
        if hint is not None:
            wait = max(wait, min(hint, MAX_RETRY_AFTER_S))
        return wait

    def cool_down(self, key: str, hint: float | None) -> Awaitable[None] | None:
        """Cool ``key`` down for the hint (capped at 60 s), else 10 s: the store's write to await.

        A zero hint asks for a cooldown that is over as it starts (SPEC 6.5): nothing is written (None), so a shared
        store is not asked to keep a deadline that has already passed, and no coroutine is made for it.
        """
        seconds = cooldown_seconds(hint)
        if seconds > 0:
            return self.store.set_cooldown(key, self.clock() + seconds)
        return None

    # --- the non-streaming walk -------------------------------------------------------------------

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """Walk the entries until one answers (SPEC 6), recording attempts in the current dispatch scope.

        Raises:
            RefusalError: The model refused and the profile does not route refusals.
            ContextWindowExceeded: The request is too large for every remaining entry.
            AllProvidersFailed: Every entry failed; ``.attempts`` lists each attempt.
        """
        return (await self.run(request, model, temperature, current_scope())).response

    async def run(
        self,
        request: ChatRequest,
        model: str,
        temperature: float | None = None,
        log: DispatchScope | None = None,
        *,
        resume: Resume | None = None,
    ) -> Served:
        """Walk the entries until one answers, recording every attempt in ``log``.

        Args:
            request: The request.
            model: The caller's model (a pinned entry sends its pin instead).
            temperature: Sampling temperature.
            log: Where the attempts go (the call's dispatch scope).
            resume: Continue after a failed stream (see :meth:`ReliableStream.resume_after`).

        Raises:
            RefusalError: The model refused and the profile does not route refusals.
            ContextWindowExceeded: The request is too large for every remaining entry.
            UnsupportedRequest: The request has images and no entry accepts them.
            AllProvidersFailed: Every entry failed; ``.attempts`` lists each attempt.
        """
        walk = Walk(self, log, model, resume.limits if resume is not None else None, request)
        images = self.may_hold_images(request, model)
        # Whether :meth:`Walk.admits` has no capability to check (while the walk knows no context window): then it
        # is asked only for the lookups, or, with nothing cooling down and no breaker open, not at all.
        plain = not asks_capabilities(request, images)
        store = self.store
        for i in walk.order:
            entry = self.entries[i]
            tries = self.tries
            if resume is not None and resume.entry == i:
                tries = resume.tries
                if tries == 0:
                    continue
            served = entry.model if entry.model is not None else model
            if walk.hedged is not None and i in walk.hedged:
                continue  # tried already, as the hedge of an earlier entry
            if plain and walk.limits is None:  # what ``walk.admits`` answers, without its call and its checks
                admission = TRY if self.single or store.calm() else walk.availability(i, entry, served, False)
            else:
                admission = walk.admits(i, entry, served, request, images, stream=False)
            if admission is not TRY and (admission is SKIP or not await walk.probe(i, entry, served)):
                continue
            if self.hedging is not None and not walk.tried and not walk.probing and resume is None:
                answer = await self._hedged(walk, i, entry, served, tries, request, temperature, images)
                if answer is not None:
                    return answer
                continue
            # What :meth:`_complete` does, in this frame: a walk's tries need no coroutine of their own per entry.
            done = await walk.tries(
                i, entry, served, 1 if walk.probing else tries, answer_of, request, temperature, check=refuse_empty
            )
            if done is not None:
                answer, closing = self._served(walk, i, entry, served, done)
                if closing is not None:
                    await closing
                return answer
            walk.probing = False
        for i in walk.panic_order():  # every entry was open or cooling down: try them all as if closed (SPEC 6.7)
            entry = self.entries[i]
            tries = resume.tries if resume is not None and resume.entry == i else self.tries
            answer = await self._complete(walk, i, entry, entry.served_model(model), tries, request, temperature)
            if answer is not None:
                return answer
        # The walk lets go of its last failure, whose traceback holds the walk (a cycle for the collector).
        failure, walk.last_failure = walk.last_failure, None
        if walk.limits is not None:
            raise ContextWindowExceeded(limit=walk.limits.limit, attempts=walk.attempts)
        if images and not any(e.capabilities(model).vision for e in self.entries):
            raise UnsupportedRequest("the request has images and no entry of this route accepts images")
        if not any(can_serve(e.capabilities(model), request) for e in self.entries):
            raise UnsupportedRequest(unservable_reason(request))
        last = failure[0] if failure is not None else None
        raise AllProvidersFailed(
            aggregate_message(walk.attempts, self.tries),
            attempts=walk.attempts,
            last_error=last,
            retry_at=walk.usable_at(),
        )

    async def _complete(
        self,
        walk: Walk,
        i: int,
        entry: Entry,
        served: str,
        tries: int,
        request: ChatRequest,
        temperature: float | None,
    ) -> Served | None:
        """Up to ``tries`` non-streaming tries on entry ``i``: the answer, or None when the walk moves on."""
        done = await walk.tries(i, entry, served, tries, answer_of, request, temperature, check=refuse_empty)
        if done is None:
            walk.probing = False
            return None
        answer, closing = self._served(walk, i, entry, served, done)
        if closing is not None:
            await closing
        return answer

    def _served(
        self, walk: Walk, i: int, entry: Entry, served: str, done: tuple[ChatResponse, KeyChoice, float, float]
    ) -> tuple[Served, Awaitable[None] | None]:
        """Entry ``i`` answered: its attempt recorded, the answer, and the closing of a probed breaker to await."""
        response, choice, started, t0 = done
        # A failure an earlier try kept holds, through its traceback, the frame of the walk's tries, which holds the
        # walk: a reference cycle that only the garbage collector would free. Served, the walk needs it no more.
        walk.last_failure = None
        usage = response.usage
        attempt = new_attempt(  # what :meth:`attempt` makes of a success, built directly (one per call)
            provider=entry.profile,
            model=served,
            outcome="ok",
            key_id=choice.key_id,
            usage=usage,
            cost_usd=self.cost(entry, served, usage),
            started_at=started,
            duration_ms=(time.perf_counter() - t0) * 1000.0,
            entry=i,
            try_number=walk.try_number,
        )
        walk.attempts.append(attempt)  # what :meth:`Walk.record` does, without its call
        log = walk.log
        if log is not None:
            log.attempts.append(attempt)
        if walk.conversation is not None:
            walk.served_by(entry, choice)
        return new_served(response, entry.route(served), i), walk.healthy(entry, served)

    async def _hedged(
        self,
        walk: Walk,
        i: int,
        entry: Entry,
        served: str,
        tries: int,
        request: ChatRequest,
        temperature: float | None,
        images: bool,
    ) -> Served | None:
        """:meth:`_complete` on entry ``i``, hedged on the next eligible entry when it is slow to answer.

        The first answer wins; the other side is cancelled (``hedge_lost``). When both sides fail, the walk
        goes on after them (the hedge's entry is not tried again).
        """
        hedging = self.hedging
        plan = self._hedge_of(entry, served, walk.pin)
        if hedging is None or plan is None:
            return await self._complete(walk, i, entry, served, tries, request, temperature)
        delay, other_keys = plan
        primary: asyncio.Future[Served | None] = asyncio.ensure_future(
            self._complete(walk, i, entry, served, tries, request, temperature)
        )
        side: Walk | None = None
        hedge: asyncio.Future[Served | None] | None = None
        try:
            done, _ = await asyncio.wait({primary}, timeout=delay)
            if done:
                return primary.result()
            target = walk.hedge_target(i, request, images, stream=False, other_keys=other_keys)
            if target is None or not hedging.take():
                return await primary
            j, other, served_j = target
            side = walk.side()
            walk.hedge_done(j)
            hedge = asyncio.ensure_future(self._complete(side, j, other, served_j, 1, request, temperature))
            pending: set[asyncio.Future[Served | None]] = {primary, hedge}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    answer = task.result()  # a stop (a refusal, no larger context window) ends the walk
                    if answer is not None:
                        if task is hedge:
                            hedging.won += 1
                        else:
                            hedging.kept += 1
                        return answer
            return None
        finally:
            sides: list[tuple[asyncio.Future[Served | None], Walk]] = [(primary, walk)]
            if hedge is not None and side is not None:
                sides.append((hedge, side))
            for task, task_walk in sides:
                if not task.done():
                    task_walk.lost = True
                    task.cancel()
            leftovers = [task for task, _ in sides]
            await asyncio.gather(*leftovers, return_exceptions=True)
            if side is not None:
                walk.attempts.extend(side.attempts)

    # --- streaming ----------------------------------------------------------------------------

    async def open_stream(
        self, request: ChatRequest, model: str, temperature: float | None = None, log: DispatchScope | None = None
    ) -> ReliableStream:
        """The stream of the first entry that can stream this request now (SPEC 7.1).

        Entries cooling down or behind an open circuit breaker are skipped (and recorded as skipped in ``log``);
        when every entry that can stream is, the first of them is opened as if closed, with its normal tries (the
        panic rule; a recovery after it goes on with the others the same way). The connection is made when the
        stream's :meth:`~ReliableStream.batches` are iterated.

        Raises:
            StreamingUnsupported: No entry can stream this request right now.
        """
        walk = Walk(self, log, model, None, request)
        images = self.may_hold_images(request, model)
        for i in walk.order:
            entry = self.entries[i]
            served = entry.model if entry.model is not None else model
            admission = walk.admits(i, entry, served, request, images, stream=True)
            if admission is TRY or (admission is PROBE and await walk.probe(i, entry, served)):
                if walk.probing:
                    return ReliableStream(walk, i, entry, served, request, temperature, tries=1)
                hedge = self._hedge_of(entry, served, walk.pin)
                return ReliableStream(walk, i, entry, served, request, temperature, hedge=hedge, images=images)
        panic = walk.panic_order()
        if panic:
            i = panic[0]
            entry = self.entries[i]
            return ReliableStream(walk, i, entry, entry.served_model(model), request, temperature, images=images)
        what = "streaming tool events" if request.tools else "streaming"
        raise StreamingUnsupported(f"No entry of this route supports {what} right now")

    def _hedge_of(self, entry: Entry, served: str, pin: Pin | None) -> tuple[float, bool] | None:
        """``(delay, other keys)`` when a call starting on ``entry`` hedges (the call is counted for the budget).

        ``pin``: the call's conversation's pin (the hedge waits longer on the member it names, see
        :meth:`HedgeSettings.delay <turnout.hedge.HedgeSettings.delay>`).
        """
        hedging = self.hedging
        if hedging is None:
            return None
        settings = hedging.settings(entry.profile)
        stats = self.stats.of(entry.health_key(served)) if self.stats is not None else None
        delay = settings.delay(stats, pinned=pin is not None and pin.member == entry.profile)
        if delay is None:
            return None
        hedging.credit(settings)
        return delay, settings.other_keys

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """One stream (see :meth:`open_stream`), recorded in the current dispatch scope.

        A failure after the first batch is not retried here: :mod:`turnout.runtime` decides whether it
        may be recovered.
        """
        stream = await self.open_stream(request, model, temperature, current_scope())
        async for batch in stream.batches():
            yield batch

    def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """:meth:`stream_batches`, one event at a time."""
        return flatten(self.stream_batches(request, model, temperature))

    # --- attempts and failures ------------------------------------------------------------------

    def attempt(
        self,
        entry: Entry,
        index: int,
        model: str,
        outcome: Outcome,
        *,
        try_number: int,
        choice: KeyChoice | None = None,
        started: float = 0.0,
        elapsed: float = 0.0,
        usage: Usage | None = None,
        error: BaseException | None = None,
        retry_after: float | None = None,
        detail: str | None = None,
        stream: bool = False,
        ttft_ms: float | None = None,
    ) -> Attempt:
        """The record of one attempt on ``entry`` (its cost is priced here)."""
        status = reason = None
        if error is not None:
            if isinstance(error, ProviderError):
                status, retry_after = error.status, error.retry_after
            detail = detail or error_detail(error)
            reason = failure_reason(error)
        return new_attempt(
            provider=entry.profile,
            model=model,
            outcome=outcome,
            status=status,
            key_id=choice.key_id if choice is not None else None,
            usage=usage,
            cost_usd=self.cost(entry, model, usage) if usage is not None else None,  # a failure rarely has usage
            started_at=started,
            duration_ms=elapsed * 1000.0,
            ttft_ms=ttft_ms,
            retry_after=retry_after,
            entry=index,
            try_number=try_number,
            stream=stream,
            detail=detail,
            reason=reason,
        )

    async def _settle(
        self,
        walk: Walk,
        index: int,
        entry: Entry,
        served: str,
        choice: KeyChoice,
        exc: Exception,
        cls: ErrorClass,
        tries_left: int,
    ) -> Action:
        """Decide what follows a failure of class ``cls`` (:func:`turnout.policy.decide`); update the state it names."""
        action, updates = self.settle(walk, index, entry, served, choice, exc, cls, tries_left)
        if updates is not None:
            await updates
        return action

    def settle(
        self,
        walk: Walk,
        index: int,
        entry: Entry,
        served: str,
        choice: KeyChoice,
        exc: Exception,
        cls: ErrorClass,
        tries_left: int,
    ) -> tuple[Action, Awaitable[None] | None]:
        """:meth:`_settle`'s decision, and its state updates to await at once (None: nothing to update).

        A failed try that updates nothing (no breaker to count it, no key to report, and no cooldown, or one that
        a zero ``Retry-After`` ends as it starts) then costs no coroutine.
        """
        pool = entry.keys
        larger = False
        if cls is _CONTEXT_WINDOW:
            if walk.limits is None:
                walk.limits = ContextLimits()
            walk.limits.failed(entry, served, self.context_window(entry, served))
            larger = walk.larger_entry_remains(index)
        rotates = pool.rotates
        now = self.clock() if rotates else 0.0  # asked for a pool's other keys only (:meth:`_update` reads its own)
        replay = True
        if type(exc) is ProviderError:  # the usual failure: its own facts, without a call or an isinstance check
            auth, hint = exc.auth_failure, exc.retry_after  # (``is_dead_key_error`` answers its ``auth_failure``)
        else:
            auth = is_dead_key_error(exc)
            hint = exc.retry_after if isinstance(exc, ProviderError) else None
            replay = not isinstance(exc, ResponseTooLarge)  # the next try would fetch the same oversized answer
        action = decide(
            cls,
            _tuple_new(  # ``Position(...)``: a named tuple's ``__new__`` is Python code (one per failed try)
                Position,
                (
                    tries_left,
                    index == walk.order[-1],
                    self.single,
                    rotates,
                    rotates and pool.other_usable(choice.index, now),
                    rotates and pool.other_live(choice.index, now),
                    entry.refusal_fallback,
                    larger,
                    walk.probing,
                ),
            ),
            auth_failure=auth,
            replay=replay,
        )
        kid = choice.key_id
        if (
            # A health failure counts once per call, when the walk leaves the entry (its retries are one signal).
            (self.breakers is not None and ((action.health and action.step is _NEXT_ENTRY_STEP) or walk.probing))
            or (action.report_key and kid is not None)
            # ``cooldown_seconds(hint) > 0`` without its call: a cooldown lasts unless a hint of 0 or less ends it
            or ((action.cool_profile or (action.cool_key and kid is not None)) and (hint is None or hint > 0))
        ):
            return action, self._update(walk, entry, served, kid, action, hint)
        return action, None

    async def _update(
        self, walk: Walk, entry: Entry, served: str, kid: str | None, action: Action, hint: float | None
    ) -> None:
        """Apply what :meth:`settle` decided: count the call's failure towards the breaker, cool down, report a key."""
        now = self.clock()
        breakers = self.breakers
        unhealthy = action.health and action.step is _NEXT_ENTRY_STEP  # the call's one signal: it leaves the entry
        if breakers is not None and (unhealthy or walk.probing):
            key = entry.health_key(served)
            if unhealthy:
                await breakers.failed(entry.profile, key, now, probing=walk.probing, reached=walk.reached)
                walk.probing = False
            elif not action.health:  # the probe was answered, if not as asked (a 400, a 429): the entry is reachable
                await breakers.succeeded(key, now, probing=True)
                walk.probing = False
        pool = entry.keys
        if action.cool_key and kid is not None and (write := self.cool_down(pool.key_cooldown(kid), hint)) is not None:
            await write
        if action.cool_profile and (write := self.cool_down(entry.profile, hint)) is not None:
            await write
        if action.report_key and kid is not None:
            await pool.report_auth_failure(kid, witness=walk.witness)
