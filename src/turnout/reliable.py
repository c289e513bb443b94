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
import itertools
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import NamedTuple, TypeVar

from turnout.attribution import Attempt, DispatchScope, Outcome, RouteRef, current_scope, new_attempt
from turnout.breaker import Gate, entry_key, gate
from turnout.classify import error_class_of, is_dead_key_error
from turnout.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    EmptyCompletion,
    ErrorClass,
    ProtocolError,
    ProviderError,
    RefusalError,
    StreamingUnsupported,
    UnsupportedRequest,
)
from turnout.health import Breakers
from turnout.keys import KeyChoice, KeyPool
from turnout.policy import Action, Position, Step, decide
from turnout.pricing import Catalogue, Rates, default_catalogue
from turnout.provider import Provider, chat_using_tools, flatten
from turnout.report import KEYS_COOLING, NO_LIVE_KEY, PROBE_TAKEN, aggregate_message, error_detail, outcome_of
from turnout.state import MemoryStore, StateStore
from turnout.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    Message,
    StreamEvent,
    Usage,
    UsageEvent,
    can_serve,
    unservable_reason,
)

MIN_BACKOFF_S = 0.05
MAX_BACKOFF_S = 10.0
MAX_RETRY_AFTER_S = 30.0
MAX_COOLDOWN_S = 60.0
DEFAULT_COOLDOWN_S = 10.0

T = TypeVar("T")

_walk_numbers = itertools.count(1)

#: Event kinds that are output: the first batch holding one marks the time to first token.
_OUTPUT_KINDS = frozenset(("text", "reasoning", "tool_call"))


@dataclass(slots=True, kw_only=True)
class Entry:
    """One (profile, model) step of a walk.

    Attributes:
        profile: ``family.alias``.
        model: The pinned model, or None to forward the caller's model.
        providers: One adapter per key of the profile's pool (one adapter for a keyless profile).
        keys: The profile's key pool, shared by all its entries.
        refusal_fallback: Route a refusal to the next entry instead of returning it.
        context_window: The profile's ``context_window`` override.
        rates: The profile's ``pricing`` override.
    """

    profile: str
    model: str | None
    providers: tuple[Provider, ...]
    keys: KeyPool
    refusal_fallback: bool = False
    context_window: int | None = None
    rates: Rates | None = None
    #: The family part of :attr:`profile`.
    family: str = field(init=False)
    _route: RouteRef | None = field(init=False, repr=False, compare=False)
    _health_key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.family = self.profile.partition(".")[0]
        self._route = None
        self._health_key = ""

    @property
    def pinned(self) -> bool:
        """Whether the entry forces its model."""
        return self.model is not None

    def served_model(self, requested: str) -> str:
        """The model this entry sends for a request asking for ``requested``."""
        return self.model if self.model is not None else requested

    def route(self, served: str) -> RouteRef:
        """This entry's route for the model it serves (the last one is kept: calls rarely change models)."""
        route = self._route
        if route is None or route.model != served:
            route = self._route = RouteRef(provider=self.profile, model=served)
            self._health_key = entry_key(self.profile, served)
        return route

    def health_key(self, served: str) -> str:
        """The key of this entry's circuit breaker for the model it serves: ``family.alias/model``."""
        route = self._route
        if route is None or route.model != served:
            self.route(served)
        return self._health_key

    def capabilities(self, requested: str | None = None) -> Capabilities:
        """The capabilities of this entry's model."""
        model = self.model if self.model is not None else requested
        return self.providers[0].capabilities(model)


class Served(NamedTuple):
    """A complete answer of the walk and the entry that produced it (a named tuple: one is made per call).

    Attributes:
        response: The answer.
        route: The profile and model that produced it.
        entry: The index of that entry in the walk.
    """

    response: ChatResponse
    route: RouteRef
    entry: int


class ContextLimits:
    """What context-window failures taught a walk: the models that failed and the largest known window.

    A walk makes one only when an entry rejects a request as too large.
    """

    __slots__ = ("failed_models", "limit")

    def __init__(self) -> None:
        self.failed_models: set[tuple[str, str]] = set()
        self.limit: int | None = None

    def failed(self, entry: Entry, model: str, window: int | None) -> None:
        """``model`` on ``entry`` (whose window is ``window``, when known) rejected the request as too large."""
        self.failed_models.add((entry.family, model))
        if window is not None:
            self.limit = max(self.limit or 0, window)

    def too_small(self, entry: Entry, model: str, window: int | None) -> bool:
        """The entry is known to be too small: the same model failed, or its window is no larger."""
        if (entry.family, model) in self.failed_models:
            return True
        return window is not None and self.limit is not None and window <= self.limit


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Where a non-streaming recovery of a failed stream continues (SPEC 7.3).

    Attributes:
        entry: The entry whose stream failed.
        tries: How many tries that entry gets: 0 skips it, 1 is one recovery attempt on it.
        limits: What the stream learned about context windows.
    """

    entry: int
    tries: int
    limits: ContextLimits | None = None


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
    ) -> None:
        if not entries:
            raise ValueError("a reliable provider needs at least one entry")
        self.entries = tuple(entries)
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
        self._vision: dict[str, bool] = {}

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

    def context_window(self, entry: Entry, model: str) -> int | None:
        """The entry's context window: the profile's setting, else the catalogue's, else None."""
        if entry.context_window is not None:
            return entry.context_window
        return self.catalogue.context_window(entry.family, model)

    def cost(self, entry: Entry, model: str, usage: Usage | None) -> float | None:
        """The cost of ``usage`` on this entry, or None when the price is unknown."""
        if usage is None:
            return None
        rates = entry.rates if entry.rates is not None else self.catalogue.rates(entry.family, model)
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
        pool = entry.keys
        if pool.rotates and not pool.all_dead() and not pool.has_usable(now):
            return pool.soonest_key_free(now)
        return None

    def backoff_sleep(self, backoff: float, hint: float | None) -> float:
        """A jittered backoff (at least half of it), raised to the Retry-After hint (capped at 30 s)."""
        wait = backoff * (0.5 + 0.5 * self.jitter())
        if hint is not None:
            wait = max(wait, min(hint, MAX_RETRY_AFTER_S))
        return wait

    async def cool_down(self, key: str, hint: float | None) -> None:
        """Cool ``key`` down for the hint (capped at 60 s), else 10 s.

        A zero hint asks for a cooldown that is over as it starts (SPEC 6.5): nothing is written, so a shared
        store is not asked to keep a deadline that has already passed.
        """
        seconds = min(hint, MAX_COOLDOWN_S) if hint is not None else DEFAULT_COOLDOWN_S
        if seconds > 0:
            await self.store.set_cooldown(key, self.clock() + seconds)

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
        walk = _Walk(self, log, model, resume.limits if resume is not None else None)
        images = self.may_hold_images(request, model)
        for i, entry in enumerate(self.entries):
            tries = self.tries
            if resume is not None and resume.entry == i:
                tries = resume.tries
                if tries == 0:
                    continue
            served = entry.model if entry.model is not None else model
            admission = walk.admits(i, entry, served, request, images, stream=False)
            if admission is Admission.SKIP or (admission is Admission.PROBE and not await walk.probe(i, entry, served)):
                continue
            answer = await self._complete(walk, i, entry, served, 1 if walk.probing else tries, request, temperature)
            if answer is not None:
                return answer
        resort = walk.last_resort()
        if resort is not None:  # every entry was open or cooling down: one try on the one unavailable longest
            entry = self.entries[resort]
            answer = await self._complete(walk, resort, entry, entry.served_model(model), 1, request, temperature)
            if answer is not None:
                return answer
        if walk.limits is not None:
            raise ContextWindowExceeded(limit=walk.limits.limit, attempts=walk.attempts)
        if images and not any(e.capabilities(model).vision for e in self.entries):
            raise UnsupportedRequest("the request has images and no entry of this route accepts images")
        if not any(can_serve(e.capabilities(model), request) for e in self.entries):
            raise UnsupportedRequest(unservable_reason(request))
        last = walk.last_failure[0] if walk.last_failure is not None else None
        raise AllProvidersFailed(aggregate_message(walk.attempts, self.tries), attempts=walk.attempts, last_error=last)

    async def _complete(
        self,
        walk: _Walk,
        i: int,
        entry: Entry,
        served: str,
        tries: int,
        request: ChatRequest,
        temperature: float | None,
    ) -> Served | None:
        """Up to ``tries`` non-streaming tries on entry ``i``: the answer, or None when the walk moves on."""
        answer = await walk.tries(i, entry, served, tries, _answer, request, temperature, check=_not_empty)
        if answer is None:
            walk.probing = False
            return None
        response, choice, started, t0 = answer
        walk.record(
            self.attempt(
                entry,
                i,
                served,
                "ok",
                try_number=walk.try_number,
                choice=choice,
                started=started,
                elapsed=time.perf_counter() - t0,
                usage=response.usage,
            )
        )
        await walk.healthy(entry, served)
        return Served(response, entry.route(served), i)

    # --- streaming ----------------------------------------------------------------------------

    async def open_stream(
        self, request: ChatRequest, model: str, temperature: float | None = None, log: DispatchScope | None = None
    ) -> ReliableStream:
        """The stream of the first entry that can stream this request now (SPEC 7.1).

        Entries cooling down or behind an open circuit breaker are skipped (and recorded as skipped in ``log``);
        when every entry that can stream is, the one unavailable longest gets one try. The connection is made
        when the stream's :meth:`~ReliableStream.batches` are iterated.

        Raises:
            StreamingUnsupported: No entry can stream this request right now.
        """
        walk = _Walk(self, log, model, None)
        images = self.may_hold_images(request, model)
        for i, entry in enumerate(self.entries):
            served = entry.model if entry.model is not None else model
            admission = walk.admits(i, entry, served, request, images, stream=True)
            if admission is Admission.TRY or (admission is Admission.PROBE and await walk.probe(i, entry, served)):
                return ReliableStream(walk, i, entry, served, request, temperature, tries=1 if walk.probing else None)
        resort = walk.last_resort()
        if resort is not None:
            entry = self.entries[resort]
            return ReliableStream(walk, resort, entry, entry.served_model(model), request, temperature, tries=1)
        what = "streaming tool events" if request.tools else "streaming"
        raise StreamingUnsupported(f"No entry of this route supports {what} right now")

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
        status = None
        if error is not None:
            if isinstance(error, ProviderError):
                status, retry_after = error.status, error.retry_after
            detail = detail or error_detail(error)
        return new_attempt(
            provider=entry.profile,
            model=model,
            outcome=outcome,
            status=status,
            key_id=choice.key_id if choice is not None else None,
            usage=usage,
            cost_usd=self.cost(entry, model, usage),
            started_at=started,
            duration_ms=elapsed * 1000.0,
            ttft_ms=ttft_ms,
            retry_after=retry_after,
            entry=index,
            try_number=try_number,
            stream=stream,
            detail=detail,
        )

    async def _settle(
        self,
        walk: _Walk,
        index: int,
        entry: Entry,
        served: str,
        choice: KeyChoice,
        exc: Exception,
        cls: ErrorClass,
        tries_left: int,
    ) -> Action:
        """Decide what follows a failure of class ``cls`` (:func:`turnout.policy.decide`); update the state it names."""
        pool = entry.keys
        larger = False
        if cls is ErrorClass.CONTEXT_WINDOW:
            if walk.limits is None:
                walk.limits = ContextLimits()
            walk.limits.failed(entry, served, self.context_window(entry, served))
            larger = walk.larger_entry_remains(index)
        rotates = pool.rotates
        now = self.clock()
        action = decide(
            cls,
            Position(
                tries_left,
                index == len(self.entries) - 1,
                len(self.entries) == 1,
                rotates,
                rotates and pool.other_usable(choice.index, now),
                rotates and pool.other_live(choice.index, now),
                entry.refusal_fallback,
                larger,
                walk.probing,
            ),
            auth_failure=is_dead_key_error(exc),
        )
        breakers = self.breakers
        if breakers is not None and (action.health or walk.probing):
            key = entry.health_key(served)
            if action.health:
                await breakers.failed(entry.profile, key, now, probing=walk.probing)
            else:  # the probe was answered, if not as asked (a 400, a 429): the entry is reachable again
                await breakers.succeeded(key, now, probing=True)
            walk.probing = False
        hint = exc.retry_after if isinstance(exc, ProviderError) else None
        kid = choice.key_id
        if action.cool_key and kid is not None:
            await self.cool_down(pool.key_cooldown(kid), hint)
        if action.cool_profile:
            await self.cool_down(entry.profile, hint)
        if action.report_key and kid is not None:
            await pool.report_auth_failure(kid, witness=walk.witness)
        return action


def _answer(provider: Provider, request: ChatRequest, model: str, temperature: float | None) -> Awaitable[ChatResponse]:
    """One non-streaming try: the adapter's answer (a plain function: no coroutine of its own around the call)."""
    if request.tools:
        return chat_using_tools(provider, request, model, temperature)
    return provider.chat(request, model, temperature)


def _not_empty(response: ChatResponse) -> None:
    """An empty answer is a failed try (SPEC 6.3)."""
    if response.is_semantically_empty:
        raise EmptyCompletion(usage=response.usage)


class Admission(Enum):
    """Whether a walk tries an entry now."""

    TRY = "try"
    SKIP = "skip"
    PROBE = "probe"
    """Its circuit breaker is half-open: the walk may try it once if it takes the probe."""


class _Walk:
    """The progress of one walk: its attempts, what context-window failures taught it, and the last failure."""

    __slots__ = (
        "attempts",
        "last_failure",
        "limits",
        "log",
        "owner",
        "probing",
        "requested",
        "tried",
        "try_number",
        "unavailable",
        "witness",
    )

    def __init__(
        self, owner: ReliableProvider, log: DispatchScope | None, requested: str, limits: ContextLimits | None
    ) -> None:
        self.owner = owner
        self.log = log
        self.requested = requested
        self.limits = limits
        self.attempts: list[Attempt] = []
        #: The failure that ended the last entry's tries, and what the policy made of it.
        self.last_failure: tuple[Exception, Action] | None = None
        #: The try number of the last try (1-based).
        self.try_number = 0
        #: What tells this walk's call from others (a key dies only when two calls agree it was rejected).
        self.witness = log.call_id if log is not None and log.call_id else f"walk-{next(_walk_numbers)}"
        #: Whether some entry was tried (called, or found without a usable key).
        self.tried = False
        #: The current try probes a half-open circuit breaker.
        self.probing = False
        #: ``(since, index, breaker)`` of each entry skipped because it was cooling down or its breaker was open.
        self.unavailable: list[tuple[float, int, bool]] | None = None

    def record(self, attempt: Attempt) -> None:
        """Keep one attempt, in the walk and in the call's log."""
        self.attempts.append(attempt)
        if self.log is not None:
            self.log.add(attempt)

    def admits(
        self, i: int, entry: Entry, served: str, request: ChatRequest, images: bool, *, stream: bool
    ) -> Admission:
        """Whether the walk tries entry ``i`` now; an entry cooling down or behind an open breaker is recorded."""
        owner = self.owner
        special = request.response_format is not None or request.native is not None
        if stream or images or special:
            caps = entry.capabilities(served)
            if images and not caps.vision:
                return Admission.SKIP
            if special and not can_serve(caps, request):
                return Admission.SKIP
            if stream and (not caps.streaming or (request.tools and not caps.streaming_tool_events)):
                return Admission.SKIP
            if stream and entry.keys.all_dead():
                return Admission.SKIP
        limits = self.limits
        if limits is not None and limits.too_small(entry, served, owner.context_window(entry, served)):
            return Admission.SKIP
        if len(owner.entries) == 1:
            return Admission.TRY
        now = owner.clock()
        until = owner.cooling_until(entry, now)
        if until is not None:
            since = owner.store.cooldown_since(entry.profile)
            self._unavailable(i, entry, served, "cooldown_skip", now, until, now if since is None else since, stream)
            return Admission.SKIP
        breakers = owner.breakers
        if breakers is not None:
            record = breakers.store.breaker(entry.health_key(served))
            if record is not None:  # a closed breaker has no record: the healthy path stops at this read
                if gate(record, now) is Gate.OPEN:
                    self._unavailable(i, entry, served, "breaker_skip", now, record.until, record.opened_at, stream)
                    return Admission.SKIP
                return Admission.PROBE
        return Admission.TRY

    async def probe(self, i: int, entry: Entry, served: str) -> bool:
        """Take the probe of entry ``i``'s half-open breaker (the try after it is the probe); else skip it."""
        owner = self.owner
        assert owner.breakers is not None
        key = entry.health_key(served)
        now = owner.clock()
        if await owner.breakers.claim_probe(key, now):
            self.probing = True
            return True
        record = owner.store.breaker(key)
        since = record.opened_at if record is not None else now
        self._unavailable(i, entry, served, "breaker_skip", now, now, since, stream=False, detail=PROBE_TAKEN)
        return False

    def _unavailable(
        self,
        i: int,
        entry: Entry,
        served: str,
        outcome: Outcome,
        now: float,
        until: float,
        since: float,
        stream: bool,
        detail: str | None = None,
    ) -> None:
        self.record(
            self.owner.attempt(
                entry,
                i,
                served,
                outcome,
                try_number=0,
                started=now,
                retry_after=until - now,
                stream=stream,
                detail=detail,
            )
        )
        if self.unavailable is None:
            self.unavailable = []
        self.unavailable.append((since, i, outcome == "breaker_skip"))

    def last_resort(self) -> int | None:
        """The entry to try once when every entry the walk considered was unavailable: the one unavailable longest.

        None when some entry was tried, or none was skipped for being unavailable. A walk never fails without
        trying (SPEC 6.7); a breaker's entry tried this way is tried as its probe.
        """
        if self.tried or not self.unavailable:
            return None
        _, index, breaker = min(self.unavailable)
        self.probing = breaker
        return index

    async def healthy(self, entry: Entry, served: str) -> None:
        """Entry ``entry`` answered: its breaker hears of it (at no cost when it has nothing to forget)."""
        breakers = self.owner.breakers
        if breakers is not None:
            key = entry.health_key(served)
            if self.probing or breakers.remembers(key):
                await breakers.succeeded(key, self.owner.clock(), probing=self.probing)
        self.probing = False

    def larger_entry_remains(self, failed: int) -> bool:
        """Whether an entry after ``failed`` is not known to be too small."""
        owner = self.owner
        limits = self.limits
        for e in owner.entries[failed + 1 :]:
            model = e.served_model(self.requested)
            if limits is None or not limits.too_small(e, model, owner.context_window(e, model)):
                return True
        return False

    async def tries(
        self,
        i: int,
        entry: Entry,
        served: str,
        tries: int,
        call: Callable[[Provider, ChatRequest, str, float | None], Awaitable[T]],
        request: ChatRequest,
        temperature: float | None,
        *,
        check: Callable[[T], None] | None = None,
        stream: bool = False,
    ) -> tuple[T, KeyChoice, float, float] | None:
        """Try entry ``i`` up to ``tries`` times with ``call``: ``(result, key, start, perf counter)`` of the success.

        Each failure is recorded, then settled by the policy: a retry sleeps the backoff first, a key
        switch retries at once, a move on returns None (:attr:`last_failure` says why), and a stop raises.
        """
        owner = self.owner
        backoff = owner.base_backoff
        self.tried = True
        for t in range(1, tries + 1):
            self.try_number = t
            started = owner.clock()
            choice = entry.keys.pick(started)
            if choice is None:
                self.record(self._no_key(i, entry, served, stream))
                return None
            t0 = time.perf_counter()
            try:
                result = await call(entry.providers[choice.index], request, served, temperature)
                if check is not None:
                    check(result)
            except asyncio.CancelledError:
                elapsed = time.perf_counter() - t0
                self.record(
                    owner.attempt(
                        entry,
                        i,
                        served,
                        "cancelled",
                        try_number=t,
                        choice=choice,
                        started=started,
                        elapsed=elapsed,
                        stream=stream,
                    )
                )
                raise
            except Exception as exc:  # every failure is classified; nothing escapes unrecorded
                elapsed = time.perf_counter() - t0
                cls = error_class_of(exc)
                self.record(
                    owner.attempt(
                        entry,
                        i,
                        served,
                        outcome_of(cls),
                        try_number=t,
                        choice=choice,
                        started=started,
                        elapsed=elapsed,
                        usage=exc.usage if isinstance(exc, EmptyCompletion) else None,
                        error=exc,
                        stream=stream,
                    )
                )
                action = await owner._settle(self, i, entry, served, choice, exc, cls, tries - t)
                self.last_failure = (exc, action)
                if action.step is Step.STOP:
                    self.stop(exc)
                if action.step is Step.NEXT_ENTRY:
                    return None
                if action.step is Step.RETRY:
                    hint = exc.retry_after if isinstance(exc, ProviderError) else None
                    await owner.sleep(owner.backoff_sleep(backoff, hint))
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            return result, choice, started, t0
        return None  # pragma: no cover - the last try always settles to a move on

    def stop(self, exc: Exception) -> None:
        """End the walk with ``exc``: a refusal as it is, a context-window failure as ``ContextWindowExceeded``."""
        if isinstance(exc, RefusalError):
            exc.attempts = tuple(self.attempts)
            raise exc
        raise ContextWindowExceeded(limit=self.limits.limit if self.limits else None, attempts=self.attempts) from exc

    def _no_key(self, i: int, entry: Entry, served: str, stream: bool) -> Attempt:
        owner = self.owner
        now = owner.clock()
        if entry.keys.all_dead():
            return owner.attempt(
                entry, i, served, "non_retryable", try_number=0, started=now, detail=NO_LIVE_KEY, stream=stream
            )
        free = entry.keys.soonest_key_free(now)
        return owner.attempt(
            entry,
            i,
            served,
            "cooldown_skip",
            try_number=0,
            started=now,
            retry_after=(free - now) if free is not None else None,
            detail=KEYS_COOLING,
            stream=stream,
        )


class ReliableStream:
    """The stream of one entry of a walk; made by :meth:`ReliableProvider.open_stream`.

    Iterating :meth:`batches` opens the stream. Until its first batch arrives, a failure is a failed try
    like a non-streaming one: recorded, settled by the policy, and retried on this entry (with backoff,
    Retry-After and key rotation) while the policy says so. Once batches flow, the stream never switches;
    its attempt is recorded when it ends.

    Attributes:
        entry: The index of the entry in the walk.
        route: The profile and model it streams from.
    """

    __slots__ = (
        "_entry",
        "_opened",
        "_record",
        "_request",
        "_temperature",
        "_tries",
        "_verdict",
        "_walk",
        "entry",
        "route",
    )

    def __init__(
        self,
        walk: _Walk,
        index: int,
        entry: Entry,
        served: str,
        request: ChatRequest,
        temperature: float | None,
        *,
        tries: int | None = None,
    ) -> None:
        self._walk = walk
        self._tries = tries if tries is not None else walk.owner.tries
        self._entry = entry
        self._request = request
        self._temperature = temperature
        self.entry = index
        self.route = entry.route(served)
        self._opened = False
        self._record: int | None = None  # index of the open stream's attempt in the walk's records
        self._verdict: Outcome | None = None  # the turn's verdict, when given before the attempt was recorded

    async def batches(self) -> AsyncGenerator[list[StreamEvent], None]:
        """The stream's event batches; its attempts go to the walk's log.

        Raises:
            ProviderError: The stream failed (classified); see :meth:`resume_after`.
            RefusalError / ContextWindowExceeded: The policy stopped the walk before the first batch.
        """
        walk, entry, index = self._walk, self._entry, self.entry
        owner = walk.owner
        served = self.route.model
        request, temperature = self._request, self._temperature
        opened = await walk.tries(index, entry, served, self._tries, _opening, request, temperature, stream=True)
        if opened is None:
            failure = walk.last_failure
            if failure is None:  # no usable key: nothing was tried
                raise StreamingUnsupported("No entry of this route has a usable key right now")
            raise failure[0]
        (upstream, batch), choice, started, t0 = opened
        self._opened = True
        ttft: float | None = None
        usage: Usage | None = None
        outcome: Outcome = "cancelled"
        error: Exception | None = None
        try:
            async with aclosing(upstream):
                following = upstream.__anext__
                while True:
                    if ttft is None and any(event.type in _OUTPUT_KINDS for event in batch):
                        ttft = (time.perf_counter() - t0) * 1000.0
                    if UsageEvent in map(type, batch):  # a scan in C: most batches are text only
                        usage = next(e for e in reversed(batch) if type(e) is UsageEvent).usage
                    if type(batch[-1]) is Final:  # Final is always the last event of a stream
                        outcome = "ok"
                        await walk.healthy(entry, served)
                    yield batch
                    try:
                        batch = await following()
                    except StopAsyncIteration:
                        break
        except (asyncio.CancelledError, GeneratorExit):
            if outcome != "ok":  # a consumer that stops right after Final still got a complete answer
                outcome = "cancelled"
            raise
        except Exception as exc:
            error = exc
            cls = error_class_of(exc)
            outcome = outcome_of(cls)
            walk.last_failure = (exc, await owner._settle(walk, index, entry, served, choice, exc, cls, 0))
            raise
        finally:
            self._record = len(walk.attempts)
            walk.record(
                owner.attempt(
                    entry,
                    index,
                    served,
                    self._verdict or outcome,
                    try_number=walk.try_number,
                    choice=choice,
                    started=started,
                    elapsed=time.perf_counter() - t0,
                    usage=usage,
                    error=error,
                    stream=True,
                    ttft_ms=ttft,
                )
            )

    def settle(self, outcome: Outcome, usage: Usage | None = None) -> None:
        """The turn's verdict on this stream's attempt: ``cancelled``, ``stream_interrupted`` or ``empty``."""
        walk = self._walk
        if self._record is None:
            self._verdict = outcome
            return
        old = walk.attempts[self._record]
        new = replace(old, outcome=outcome, usage=usage if usage is not None else old.usage)
        walk.attempts[self._record] = new
        log = walk.log
        if log is not None:
            for n in range(len(log.attempts) - 1, -1, -1):
                if log.attempts[n] is old:
                    log.attempts[n] = new
                    break

    @property
    def in_flight(self) -> bool:
        """Whether the stream is open and its attempt not recorded yet (it records itself when it ends)."""
        return self._opened and self._record is None

    def resume_after(self, *, failed: bool) -> Resume | None:
        """Where a non-streaming recovery continues after this stream gave no answer; None: no recovery.

        ``failed``: the stream failed (False: it completed semantically empty). A failure the policy
        stopped on (a refusal the profile does not route, a request too large for every entry) is not
        recovered. Otherwise the recovery skips this entry, unless it is the walk's only one (one recovery
        attempt on it, SPEC 7.3); a semantically empty stream gets one recovery attempt on this entry when
        retries are allowed.
        """
        walk = self._walk
        single = len(walk.owner.entries) == 1
        if not failed:
            tries = 1 if walk.owner.retries > 0 or single else 0
        elif walk.last_failure is not None and walk.last_failure[1].step is Step.STOP:
            return None
        else:
            tries = 1 if single else 0
        return Resume(entry=self.entry, tries=tries, limits=walk.limits)


async def _opening(
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


def has_images(messages: Sequence[Message]) -> bool:
    """Whether any message carries an image."""
    return any(type(m.content) is not str and m.images for m in messages)
