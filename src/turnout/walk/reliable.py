"""The reliable walk: the entries of one route, tried in order with retries, backoff and key rotation.

:class:`ReliableProvider` holds the adapters of one route's entries; it is not itself a
:class:`~turnout.core.provider.Provider`. Its callers (the client, the streaming runtime) pass it each call's
:class:`~turnout.core.attribution.DispatchScope` explicitly. It answers in two ways:

- :meth:`ReliableProvider.run` walks the entries for one complete answer and returns it with the
  entry that produced it (:class:`Served`);
- :meth:`ReliableProvider.open_stream` picks the first entry that can stream the request and returns a
  :class:`ReliableStream`: its batches come from that entry only, and a failure before the first batch
  is retried on that entry like a non-streaming try. Whether a failed stream is recovered
  is the streaming runtime's decision (:mod:`turnout.runtime`); :meth:`ReliableStream.resume_after`
  says where such a recovery continues, and :meth:`run` takes it as ``resume``.

:class:`ReliableProvider` orders the entries for each call (:meth:`ReliableProvider.visit_order`), starts its
:class:`~turnout.walk.walk.Walk` with the route's :class:`~turnout.walk.context.WalkContext` (made once here), and runs
hedges. The walk makes the tries: what a failure means comes from :mod:`turnout.core.classify`, what the walk does
about it from :func:`turnout.walk.policy.decide`, for both forms, applied in one place (:meth:`Walk.settle
<turnout.walk.walk.Walk.settle>`). Every attempt is recorded in the call's dispatch scope.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence

from turnout.core.attribution import DispatchScope
from turnout.core.describe import aggregate_message
from turnout.core.environment import REAL, Environment
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    StreamingUnsupported,
    TurnoutError,
    UnsupportedRequest,
)
from turnout.core.types import ChatRequest, can_serve, unservable_reason
from turnout.ledger.pricing import Catalogue, default_catalogue
from turnout.state import MemoryStore, StateStore
from turnout.state.pins import Pin
from turnout.walk.affinity import Affinity, conversation_key
from turnout.walk.breakers import Breakers
from turnout.walk.context import WalkContext
from turnout.walk.entry import Candidate, ContextLimits, Entry, PoolOrder, Resume, Served, has_images, pool_blocks
from turnout.walk.hedge import Hedging
from turnout.walk.reliable_stream import ReliableStream
from turnout.walk.stats import Stats
from turnout.walk.walk import Admission, Walk, answer_of, refuse_empty

MIN_BACKOFF_S = 0.05


__all__ = ["ContextLimits", "Entry", "PoolOrder", "ReliableProvider", "ReliableStream", "Resume", "Served"]


class ReliableProvider:
    """Walks the entries of one route with retries, backoff, cooldowns and key rotation.

    Args:
        entries: The materialised order.
        provider_retries: Retries per entry (each entry is tried ``provider_retries + 1`` times).
        provider_backoff_ms: The first backoff (floored at 50 ms; doubles per sleep; capped at 10 s).
        store: Cooldown and key state (default: in memory).
        catalogue: Prices and context windows when a profile does not set them.
        env: The clock (cooldown deadlines, attempt start times), the sleep between tries and the backoff's jitter
            (default: the real ones; tests inject fakes).
        name: A label for logs.
        breakers: The entries' circuit breakers (None: none; the factory passes the client's, shared by every
            walk, so an entry's health is learned whichever route reaches it).
        stats: Calls in flight and times to first token per entry, for pools and hedging (None: not kept).
        hedging: Hedged requests (None: no hedging; see :mod:`turnout.walk.hedge`).
        affinity: Conversations' pins to pool members (None: pools order every call by their strategy alone; see
            :mod:`turnout.walk.affinity`).
    """

    def __init__(
        self,
        entries: Sequence[Entry],
        *,
        provider_retries: int = 2,
        provider_backoff_ms: int = 500,
        store: StateStore | None = None,
        catalogue: Catalogue | None = None,
        env: Environment | None = None,
        name: str = "reliable",
        breakers: Breakers | None = None,
        stats: Stats | None = None,
        hedging: Hedging | None = None,
        affinity: Affinity | None = None,
    ) -> None:
        if not entries:
            raise ValueError("a reliable provider needs at least one entry")
        self.entries = tuple(entries)
        self.name = name
        self._vision: dict[str, bool] = {}
        #: The entries' indices in configured order, and whether some run of them stands for a pool.
        self.entry_order = tuple(range(len(self.entries)))
        self._blocks = pool_blocks(self.entries)
        self.pooled = self._blocks is not None
        #: What every walk of this route reaches (its walks read it; replace it to change a setting).
        self.context = WalkContext(
            entries=self.entries,
            tries=provider_retries + 1,
            base_backoff=max(provider_backoff_ms / 1000.0, MIN_BACKOFF_S),
            store=store if store is not None else MemoryStore(),
            catalogue=catalogue if catalogue is not None else default_catalogue(),
            env=env if env is not None else REAL,
            breakers=breakers,
            stats=stats,
            hedging=hedging if hedging is not None and hedging.enabled else None,
            # pins of conversations to members, kept only when some pool leads or falls back here
            affinity=affinity if self.pooled else None,
        )

    def visit_order(self, pin: Pin | None = None, requested: str = "", *, keyed: bool = False) -> Sequence[int]:
        """The entries' indices in the order one call tries them: each pool's members arranged by the pool.

        With ``keyed`` (the call's conversation is known), the affinity puts the conversation's ``pin`` first
        while it is healthy, and keeps new conversations off a member beyond its share (:mod:`turnout.walk.affinity`).
        """
        blocks = self._blocks
        if blocks is None:
            return self.entry_order
        context = self.context
        affinity = context.affinity if keyed else None
        out: list[int] = []
        for indices, pool in blocks:
            if pool is None:
                out.extend(indices)
                continue
            by_member: dict[str, list[int]] = {}
            for i in indices:
                by_member.setdefault(self.entries[i].profile, []).append(i)
            if affinity is None:
                members = pool.arrange(list(by_member), context.stats)
            else:
                healthy: Callable[[str], bool] | None = None  # no pin to check: all healthy
                if pin is not None:
                    first = {m: self.entries[found[0]] for m, found in by_member.items()}
                    healthy = functools.partial(self._ready, first, requested, context.env.clock())
                members = affinity.arrange(list(by_member), pin, healthy, pool, context.stats)
            for member in members:
                out.extend(by_member[member])
        return out

    def _ready(self, first: dict[str, Entry], requested: str, now: float, member: str) -> bool:
        """Whether pool ``member`` (its first entry in ``first``) is neither cooling down nor behind an open breaker."""
        entry = first[member]
        if self.context.cooling_until(entry, now) is not None:
            return False
        return self.context.store.breaker(entry.health_key(entry.model_for(requested))) is None

    def new_walk(
        self,
        log: DispatchScope | None,
        requested: str,
        limits: ContextLimits | None = None,
        request: ChatRequest | None = None,
    ) -> Walk:
        """A walk of one call (recorded in ``log``) over the entries, in the order :meth:`visit_order` gives it.

        ``request``: the call's chat request, whose conversation the affinity looks up (None: no conversation).
        """
        context = self.context
        affinity = context.affinity
        if affinity is None or request is None:
            return Walk(
                context, log, requested, limits, self.visit_order(None, requested) if self.pooled else self.entry_order
            )
        conversation = conversation_key(request)
        pin = affinity.pin_for(conversation) if conversation else None
        order = self.visit_order(pin, requested, keyed=conversation is not None)
        return Walk(context, log, requested, limits, order, conversation, pin)

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

    # --- the non-streaming walk -------------------------------------------------------------------

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
        context = self.context
        walk = self.new_walk(log, model, resume.limits if resume is not None else None, request)
        images = self.may_hold_images(request, model)
        for i in walk.order:
            tries = context.tries
            if resume is not None and resume.entry == i:
                tries = resume.tries
                if tries == 0:
                    continue
            if walk.hedged is not None and i in walk.hedged:
                continue  # tried already, as the hedge of an earlier entry
            c = walk.candidate(i)
            admission = walk.admits(c, request, images, stream=False)
            if admission is not Admission.TRY and (admission is Admission.SKIP or not await walk.probe(c)):
                continue
            if context.hedging is not None and not walk.tried and not walk.probing and resume is None:
                answer = await self._hedged(walk, c, tries, request, temperature, images)
                if answer is not None:
                    return answer
                continue
            answer = await self._complete(walk, c, 1 if walk.probing else tries, request, temperature)
            if answer is not None:
                return answer
        for i in walk.panic_order():  # every entry was open or cooling down: try them all as if closed
            tries = resume.tries if resume is not None and resume.entry == i else context.tries
            answer = await self._complete(walk, walk.candidate(i), tries, request, temperature)
            if answer is not None:
                return answer
        raise self._failure(walk, request, model, images)

    def _failure(self, walk: Walk, request: ChatRequest, model: str, images: bool) -> TurnoutError:
        """The error a walk that found no answer ends with (see :meth:`run`'s Raises)."""
        # The walk lets go of its last failure, whose traceback holds the walk (a cycle for the collector).
        failure = walk.take_failure()
        if walk.limits is not None:
            return ContextWindowExceeded(limit=walk.limits.limit, attempts=walk.attempts)
        if images and not any(e.capabilities(model).vision for e in self.entries):
            return UnsupportedRequest("the request has images and no entry of this route accepts images")
        if not any(can_serve(e.capabilities(model), request) for e in self.entries):
            return UnsupportedRequest(unservable_reason(request))
        last = failure[0] if failure is not None else None
        return AllProvidersFailed(
            aggregate_message(walk.attempts, self.context.tries),
            attempts=walk.attempts,
            last_error=last,
            retry_at=walk.usable_at(),
        )

    async def _complete(
        self, walk: Walk, c: Candidate, tries: int, request: ChatRequest, temperature: float | None
    ) -> Served | None:
        """Up to ``tries`` non-streaming tries on ``c``: the answer, or None when the walk moves on."""
        done = await walk.tries(c, tries, answer_of, request, temperature, check=refuse_empty)
        return None if done is None else await walk.served(c, done, request)

    async def _hedged(
        self,
        walk: Walk,
        c: Candidate,
        tries: int,
        request: ChatRequest,
        temperature: float | None,
        images: bool,
    ) -> Served | None:
        """:meth:`_complete` on ``c``, hedged on the next eligible entry when it is slow to answer.

        The first answer wins; the other side is cancelled (``hedge_lost``). When both sides fail, the walk
        goes on after them (the hedge's entry is not tried again).
        """
        hedging = self.context.hedging
        plan = self._hedge_of(c, walk.pin)
        if hedging is None or plan is None:
            return await self._complete(walk, c, tries, request, temperature)
        delay, other_keys = plan
        primary: asyncio.Future[Served | None] = asyncio.ensure_future(
            self._complete(walk, c, tries, request, temperature)
        )
        side: Walk | None = None
        hedge: asyncio.Future[Served | None] | None = None
        try:
            done, _ = await asyncio.wait({primary}, timeout=delay)
            if done:
                return primary.result()
            target = walk.hedge_target(c.index, request, images, stream=False, other_keys=other_keys)
            if target is None or not hedging.take():
                return await primary
            side = walk.side()
            walk.hedge_done(target.index)
            hedge = asyncio.ensure_future(self._complete(side, target, 1, request, temperature))
            return await _first_answer(hedging, primary, hedge)
        finally:
            sides: list[tuple[asyncio.Future[Served | None], Walk]] = [(primary, walk)]
            if hedge is not None and side is not None:
                sides.append((hedge, side))
            for task, task_walk in sides:
                if not task.done():
                    task_walk.lose()
                    task.cancel()
            leftovers = [task for task, _ in sides]
            await asyncio.gather(*leftovers, return_exceptions=True)
            if side is not None:
                walk.join(side)

    # --- streaming ----------------------------------------------------------------------------

    async def open_stream(
        self, request: ChatRequest, model: str, temperature: float | None = None, log: DispatchScope | None = None
    ) -> ReliableStream:
        """The stream of the first entry that can stream this request now.

        Entries cooling down or behind an open circuit breaker are skipped (and recorded as skipped in ``log``);
        when every entry that can stream is, the first of them is opened as if closed, with its normal tries (the
        panic rule; a recovery after it goes on with the others the same way). The connection is made when the
        stream's :meth:`~ReliableStream.batches` are iterated.

        Raises:
            StreamingUnsupported: No entry can stream this request right now.
        """
        walk = self.new_walk(log, model, None, request)
        images = self.may_hold_images(request, model)
        for i in walk.order:
            c = walk.candidate(i)
            admission = walk.admits(c, request, images, stream=True)
            if admission is Admission.TRY or (admission is Admission.PROBE and await walk.probe(c)):
                if walk.probing:
                    return ReliableStream(walk, c, request, temperature, tries=1)
                hedge = self._hedge_of(c, walk.pin)
                return ReliableStream(walk, c, request, temperature, hedge=hedge, images=images)
        panic = walk.panic_order()
        if panic:
            return ReliableStream(walk, walk.candidate(panic[0]), request, temperature, images=images)
        what = "streaming tool events" if request.tools else "streaming"
        raise StreamingUnsupported(f"No entry of this route supports {what} right now")

    def _hedge_of(self, c: Candidate, pin: Pin | None) -> tuple[float, bool] | None:
        """``(delay, other keys)`` when a call starting on ``c`` hedges (the call is counted for the budget).

        ``pin``: the call's conversation's pin (the hedge waits longer on the member it names, see
        :meth:`HedgeSettings.delay <turnout.walk.hedge.HedgeSettings.delay>`).
        """
        hedging, stats = self.context.hedging, self.context.stats
        if hedging is None:
            return None
        settings = hedging.settings(c.entry.profile)
        entry_stats = stats.of(c.entry.health_key(c.model)) if stats is not None else None
        delay = settings.delay(entry_stats, pinned=pin is not None and pin.member == c.entry.profile)
        if delay is None:
            return None
        hedging.credit(settings)
        return delay, settings.other_keys


async def _first_answer(
    hedging: Hedging, primary: asyncio.Future[Served | None], hedge: asyncio.Future[Served | None]
) -> Served | None:
    """The first answer of a hedged race, counted as won by the hedge or kept by the primary (None: both failed)."""
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
