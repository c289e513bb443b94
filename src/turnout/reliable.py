"""The reliable walk: retries, backoff, Retry-After, cooldowns, key rotation, and the aggregate error.

:class:`ReliableProvider` wraps the materialised entries of one route and implements the provider
contract, so routers and clients compose it like any other provider. For each entry in order it makes up
to ``provider_retries + 1`` tries; a success ends the walk. What each failure means comes from
:mod:`turnout.classify`; what the walk does about it is decided here, in one place:

==========================  ===========================================================================
class                       what the walk does
==========================  ===========================================================================
retryable                   retry the same entry after a backoff (raised to the Retry-After hint)
rate_limited                key pool: cool that key down and retry at once with the next key;
                            else, with other entries: cool the profile down and move on;
                            else (single entry): retry after the backoff / Retry-After
rate_limited_non_retryable  move on at once
non_retryable               move on at once (a 401/403 key is dead; the next key of the pool is tried)
context_window              never retry that model; skip to the next entry whose context window is larger
                            or unknown; none left: ``ContextWindowExceeded``
refusal                     raise ``RefusalError`` (unless the profile sets ``refusal_fallback``)
timeout                     move on; retried only on the last entry
empty                       retry after the backoff, then move on
==========================  ===========================================================================
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from turnout.attribution import Attempt, DispatchScope, Outcome, RouteRef, current_scope, new_attempt
from turnout.classify import error_class_of, is_dead_key_error
from turnout.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    ErrorClass,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamTruncated,
    UnsupportedRequest,
)
from turnout.keys import KeyChoice, KeyPool, call_witness
from turnout.pricing import Catalogue, Rates, default_catalogue
from turnout.provider import Provider, chat_using_tools, flatten
from turnout.state import MemoryStore, StateStore
from turnout.types import Capabilities, ChatRequest, ChatResponse, Message, StreamEvent, Usage

MIN_BACKOFF_S = 0.05
MAX_BACKOFF_S = 10.0
MAX_RETRY_AFTER_S = 30.0
MAX_COOLDOWN_S = 60.0
DEFAULT_COOLDOWN_S = 10.0
MAX_RETAINED_EVENTS = 8
MAX_AGGREGATE_BYTES = 2048

_walk_ids = itertools.count(1)


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
    _ref: RouteRef | None = field(init=False, repr=False, compare=False)
    #: The catalogue's rates for the last model priced: ``(model, catalogue, rates)``.
    _priced: tuple[str, Catalogue, Rates | None] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.family = self.profile.partition(".")[0]
        self._ref = None
        self._priced = None

    @property
    def pinned(self) -> bool:
        """Whether the entry forces its model."""
        return self.model is not None

    def served_model(self, requested: str) -> str:
        """The model this entry sends for a request asking for ``requested``."""
        return self.model if self.model is not None else requested

    def route(self, served: str) -> RouteRef:
        """This entry's route for the model it serves (the last one is kept: calls rarely change models)."""
        ref = self._ref
        if ref is None or ref.model != served:
            ref = self._ref = RouteRef(provider=self.profile, model=served)
        return ref

    def capabilities(self, requested: str | None = None) -> Capabilities:
        """The capabilities of this entry's model."""
        model = self.model if self.model is not None else requested
        return self.providers[0].capabilities(model)


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
        self.id = next(_walk_ids)
        self._several = len(self.entries) > 1
        self._vision: dict[str, bool] = {}

    # --- capabilities ---------------------------------------------------------------------

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

    # --- helpers ----------------------------------------------------------------------------

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
            priced = entry._priced
            if priced is None or priced[0] != model or priced[1] is not self.catalogue:
                priced = entry._priced = (model, self.catalogue, self.catalogue.rates(entry.family, model))
            rates = priced[2]
        return rates.cost(usage) if rates is not None else None

    def may_hold_images(self, request: ChatRequest, model: str) -> bool:
        """Whether ``request`` has images and some entry does not accept them for ``model``.

        When every entry accepts images, a request's images change nothing about the walk, so its messages
        are not scanned (the answer per model is kept: capabilities do not change).
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

    def _attempt(
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

    # --- the walk ---------------------------------------------------------------------------

    def chat(  # returns the walk's coroutine without another frame around it
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> Coroutine[Any, Any, ChatResponse]:
        """Walk the entries until one answers (SPEC 6), recording attempts in the current dispatch scope.

        Raises:
            RefusalError: The model refused and the profile does not route refusals.
            ContextWindowExceeded: The request is too large for every remaining entry.
            AllProvidersFailed: Every entry failed; ``.attempts`` lists each attempt.
        """
        return self.chat_in_scope(request, model, temperature, current_scope())

    async def chat_in_scope(
        self, request: ChatRequest, model: str, temperature: float | None, scope: DispatchScope | None
    ) -> ChatResponse:
        """:meth:`chat`, recording its attempts in ``scope`` (the client passes its call's scope)."""
        walk = _Walk(self, scope, model)
        recovery = None
        if scope is not None:
            scope.walk_entries = len(self.entries)
            if scope.recovery is not None and scope.recovery.walk == self.id:
                recovery, scope.recovery = scope.recovery, None
        images = self.may_hold_images(request, model)
        several = self._several
        for i, entry in enumerate(self.entries):
            tries = self.tries
            if recovery is not None and recovery.entry == i:
                tries = recovery.tries
                if tries == 0:
                    continue
            served = entry.model if entry.model is not None else model
            if images and not entry.capabilities(model).vision:
                continue
            if walk.context_overflow and walk.too_small(entry, served):
                continue
            if several:
                now = self.clock()
                until = self.cooling_until(entry, now)
                if until is not None:
                    walk.record(
                        self._attempt(
                            entry, i, served, "cooldown_skip", try_number=0, started=now, retry_after=until - now
                        )
                    )
                    continue
            result = await self._try_entry(walk, i, entry, request, served, temperature, tries)
            if result is not None:
                if scope is not None:
                    scope.served = entry.route(served)
                    scope.served_entry = (self.id, i)
                return result
        if walk.context_overflow:
            raise ContextWindowExceeded(limit=walk.context_limit, attempts=walk.attempts)
        if images and not any(e.capabilities(model).vision for e in self.entries):
            raise UnsupportedRequest("the request has images and no entry of this route accepts images")
        raise AllProvidersFailed(aggregate_message(walk.attempts, self.tries), attempts=walk.attempts)

    async def _try_entry(
        self,
        walk: _Walk,
        i: int,
        entry: Entry,
        request: ChatRequest,
        served: str,
        temperature: float | None,
        tries: int,
    ) -> ChatResponse | None:
        backoff = self.base_backoff
        last_entry = i == len(self.entries) - 1
        for t in range(1, tries + 1):
            started = self.clock()
            choice = entry.keys.pick(started)
            if choice is None:
                walk.record(self._no_key_attempt(entry, i, served))
                return None
            provider = entry.providers[choice.index]
            t0 = time.perf_counter()
            try:
                if request.tools:
                    response = await chat_using_tools(provider, request, served, temperature)
                else:
                    response = await provider.chat(request, served, temperature)
            except asyncio.CancelledError:
                walk.record(
                    self._attempt(
                        entry,
                        i,
                        served,
                        "cancelled",
                        try_number=t,
                        choice=choice,
                        started=started,
                        elapsed=time.perf_counter() - t0,
                    )
                )
                raise
            except Exception as exc:  # every failure is classified; nothing escapes unrecorded
                elapsed = time.perf_counter() - t0
                cls = error_class_of(exc)
                walk.record(
                    self._attempt(
                        entry,
                        i,
                        served,
                        outcome_of(cls),
                        try_number=t,
                        choice=choice,
                        started=started,
                        elapsed=elapsed,
                        error=exc,
                    )
                )
                hint = exc.retry_after if isinstance(exc, ProviderError) else None
                action = await self._after_failure(walk, entry, choice, exc, cls, hint, last_entry)
                if action == "raise":
                    raise
                if action == "next_key" and t < tries:
                    continue
                if action in ("next_entry", "next_key"):
                    return None
                if t < tries:
                    await self.sleep(self.backoff_sleep(backoff, hint))
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            elapsed = time.perf_counter() - t0
            if response.is_semantically_empty:
                walk.record(
                    self._attempt(
                        entry,
                        i,
                        served,
                        "empty",
                        try_number=t,
                        choice=choice,
                        started=started,
                        elapsed=elapsed,
                        usage=response.usage,
                        detail="empty_response",
                    )
                )
                if t < tries:
                    await self.sleep(self.backoff_sleep(backoff, None))
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            # The success path: the attempt goes straight to the call's records (the walk is over).
            usage = response.usage
            attempt = new_attempt(
                provider=entry.profile,
                model=served,
                outcome="ok",
                key_id=choice.key_id,
                usage=usage,
                cost_usd=self.cost(entry, served, usage) if usage is not None else None,
                started_at=started,
                duration_ms=elapsed * 1000.0,
                entry=i,
                try_number=t,
            )
            walk.attempts.append(attempt)
            if walk.scope is not None:
                walk.scope.attempts.append(attempt)
            return response
        return None

    def _no_key_attempt(self, entry: Entry, i: int, served: str) -> Attempt:
        now = self.clock()
        if entry.keys.all_dead():
            return self._attempt(entry, i, served, "non_retryable", try_number=0, started=now, detail="no_live_key")
        free = entry.keys.soonest_key_free(now)
        return self._attempt(
            entry,
            i,
            served,
            "cooldown_skip",
            try_number=0,
            started=now,
            retry_after=(free - now) if free is not None else None,
            detail="keys_cooling",
        )

    async def _after_failure(
        self,
        walk: _Walk,
        entry: Entry,
        choice: KeyChoice,
        exc: Exception,
        cls: ErrorClass,
        hint: float | None,
        last_entry: bool,
    ) -> str:
        """Decide what follows a failed try: ``raise``, ``next_entry``, ``next_key`` or ``retry``."""
        if cls is ErrorClass.REFUSAL:
            if entry.refusal_fallback:
                return "next_entry"
            if isinstance(exc, RefusalError):
                exc.attempts = tuple(walk.attempts)
            return "raise"
        if cls is ErrorClass.CONTEXT_WINDOW:
            walk.context_failed(entry, walk.attempts[-1].model)
            if not walk.larger_entry_remains(walk.attempts[-1].entry, walk.requested):
                raise ContextWindowExceeded(limit=walk.context_limit, attempts=walk.attempts) from exc
            return "next_entry"
        if cls is ErrorClass.RATE_LIMITED:
            pool = entry.keys
            if pool.rotates and choice.key_id is not None:
                await self.cool_down(pool.key_cooldown(choice.key_id), hint)
                if pool.has_usable(self.clock()):
                    return "next_key"
                await self.cool_down(entry.profile, hint)
                return "next_entry"
            if len(self.entries) > 1:
                await self.cool_down(entry.profile, hint)
                return "next_entry"
            return "retry"
        if cls is ErrorClass.RATE_LIMITED_NON_RETRYABLE:
            return "next_entry"
        if cls is ErrorClass.NON_RETRYABLE:
            if is_dead_key_error(exc) and choice.key_id is not None:
                await entry.keys.report_auth_failure(choice.key_id, witness=call_witness(walk.scope or walk))
                if entry.keys.rotates and not entry.keys.all_dead():
                    return "next_key"
            return "next_entry"
        if cls is ErrorClass.TIMEOUT and not last_entry:
            return "next_entry"
        return "retry"

    def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Open one stream on the first eligible entry (SPEC 7.1), recorded in the current dispatch scope.

        Failures are not retried here: :mod:`turnout.runtime` decides whether they may be recovered.
        """
        return flatten(self.stream_batches_in_scope(request, model, temperature, current_scope()))

    def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """:meth:`stream` in batches (see :meth:`Provider.stream_batches`)."""
        return self.stream_batches_in_scope(request, model, temperature, current_scope())

    def stream_batches_in_scope(
        self, request: ChatRequest, model: str, temperature: float | None, scope: DispatchScope | None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """:meth:`stream_batches`, recording its attempt in ``scope`` (the runtime passes its call's scope)."""
        from turnout.reliable_stream import stream_first_eligible

        return stream_first_eligible(self, request, model, temperature, scope)


class _Walk:
    """The state of one walk: its attempts, and what context-window failures taught it."""

    __slots__ = ("attempts", "context_limit", "context_models", "context_overflow", "owner", "requested", "scope")

    def __init__(self, owner: ReliableProvider, scope: DispatchScope | None, requested: str) -> None:
        self.owner = owner
        self.scope = scope
        self.attempts: list[Attempt] = []
        self.context_overflow = False
        self.context_limit: int | None = None
        self.context_models: set[tuple[str, str]] | None = None  # made on the first context-window failure
        self.requested = requested

    def record(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        if self.scope is not None:
            self.scope.attempts.append(attempt)

    def context_failed(self, entry: Entry, model: str) -> None:
        """Remember that ``model`` on ``entry`` rejected the request as too large."""
        self.context_overflow = True
        if self.context_models is None:
            self.context_models = set()
        self.context_models.add((entry.family, model))
        window = self.owner.context_window(entry, model)
        if window is not None:
            self.context_limit = max(self.context_limit or 0, window)

    def too_small(self, entry: Entry, model: str) -> bool:
        """The entry is known to be too small: the same model failed, or its window is no larger."""
        if self.context_models is not None and (entry.family, model) in self.context_models:
            return True
        window = self.owner.context_window(entry, model)
        return window is not None and self.context_limit is not None and window <= self.context_limit

    def larger_entry_remains(self, failed_index: int, requested: str) -> bool:
        """Whether an entry after ``failed_index`` is not known to be too small."""
        return any(not self.too_small(e, e.served_model(requested)) for e in self.owner.entries[failed_index + 1 :])


def has_images(messages: Sequence[Message]) -> bool:
    """Whether any message carries an image (a loop: cheaper than ``any`` over a generator, on every call)."""
    for m in messages:  # noqa: SIM110
        if type(m.content) is not str and m.images:
            return True
    return False


_OUTCOMES: dict[ErrorClass, Outcome] = {c: c.value for c in ErrorClass}


def outcome_of(cls: ErrorClass) -> Outcome:
    """The ledger outcome of an error class (the same names)."""
    return _OUTCOMES[cls]


def error_detail(exc: BaseException) -> str:
    """A content-free tag for an exception (no message text)."""
    if type(exc) is ProviderError:  # an HTTP error response, the common case: no subclass to tell apart
        return f"http_{exc.status}" if exc.status is not None else (exc.error_type or "provider_error")
    if isinstance(exc, ProviderTimeout):
        return f"timeout:{exc.phase}"
    if isinstance(exc, StreamTruncated):
        return "stream_truncated"
    if isinstance(exc, ProtocolError):
        return "protocol_error"
    if isinstance(exc, ProviderConnectionError):
        return "connection"
    if isinstance(exc, RefusalError):
        return "refusal"
    if isinstance(exc, ProviderError):
        return f"http_{exc.status}" if exc.status is not None else (exc.error_type or "provider_error")
    return type(exc).__name__


# --- the aggregate error ----------------------------------------------------------------------


def diagnostic(a: Attempt) -> tuple[str, str, str]:
    """Content-free ``(kind, phase, hint)`` for a failed attempt."""
    if a.outcome == "cooldown_skip":
        return "rate_limited", "cooldown", "wait for provider cooldown or switch provider"
    if a.outcome == "rate_limited":
        return "rate_limited", "http_response", "wait, change key/quota, or switch provider"
    if a.outcome == "rate_limited_non_retryable":
        return "quota", "http_response", "check the account's balance, quota or plan, or switch provider"
    if a.outcome == "context_window":
        return "context_window", "request_validation", "reduce context or use a larger-context model"
    if a.outcome == "refusal":
        return "refusal", "response", "the model declined to answer"
    if a.outcome == "empty":
        return "empty_response", "response", "provider returned no text and no tool calls"
    if a.outcome == "timeout":
        phase = (a.detail or "timeout:total").partition(":")[2] or "total"
        if phase == "connect":
            return "connect_timeout", "tls_or_connect", "check network, VPN, firewall, or switch provider"
        return "timeout", phase, "provider request timed out; retry or switch provider"
    if a.status in (401, 403) or a.detail == "no_live_key":
        return "auth", "http_response", "check provider credentials"
    if a.status == 404:
        return "model_not_found", "http_response", "check the configured model id for this provider"
    if a.status is not None and a.status >= 500:
        return "provider_server", "http_response", "provider returned a server error; retry or switch provider"
    if a.status is not None and 400 <= a.status < 500:
        return "client_error", "http_response", "provider rejected the request; check config, model, or request"
    if a.detail == "connection":
        return "connect", "connect", "could not reach the provider; check network or switch provider"
    if a.detail in ("stream_truncated", "protocol_error"):
        return a.detail, "response", "provider response was incomplete or malformed; retry or switch provider"
    return "provider_error", "unknown", "inspect provider error or switch provider"


_REASONS = {"empty": "empty_response", "cooldown_skip": "rate_limit_cooldown"}


def aggregate_message(attempts: Sequence[Attempt], max_tries: int) -> str:
    """The bounded, content-free summary of a failed walk (first 8 events, at most 2 KiB).

    ``All model providers/models failed after N failure event(s). Events:`` followed by one line per
    event: ``event {n} (retry {try}/{max}): {reason}; kind=…; phase=…; hint=…``.
    """
    failures = [a for a in attempts if a.outcome != "ok"]
    total = len(failures)
    header = f"All model providers/models failed after {total} failure event(s). Events:"
    lines = []
    for n, a in enumerate(failures[:MAX_RETAINED_EVENTS], 1):
        kind, phase, hint = diagnostic(a)
        reason = _REASONS.get(a.outcome, a.outcome)
        lines.append(f"event {n} (retry {a.try_number}/{max_tries}): {reason}; kind={kind}; phase={phase}; hint={hint}")
    out = header
    kept = 0
    for line in lines:
        omitted_after = total - kept - 1
        marker = f"\n[{omitted_after} additional failure event(s) omitted]" if omitted_after else ""
        if len((out + "\n" + line + marker).encode()) > MAX_AGGREGATE_BYTES:
            break
        out += "\n" + line
        kept += 1
    if kept < total:
        out += f"\n[{total - kept} additional failure event(s) omitted]"
    return out
