"""What every walk of one route reaches: its entries, state, breakers, environment, backoff, prices and hedging.

A :class:`WalkContext` is made once per :class:`~turnout.walk.reliable.ReliableProvider` and handed to each
:class:`~turnout.walk.walk.Walk` it starts. It holds the route's settings and shared objects, and answers the
lookups a walk makes with them alone: an entry's context window, what an answer's usage is billed
(:func:`turnout.core.estimate.billed_usage`) and what it costs (:mod:`turnout.ledger.pricing`), when an entry stops
cooling down (:mod:`turnout.state`), a backoff's length and a cooldown's write, and the record of an attempt
(:mod:`turnout.core.attribution`). It knows nothing of any one call; the walk keeps that.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from turnout.core.attribution import Attempt, Outcome, new_attempt
from turnout.core.describe import error_detail, failure_reason
from turnout.core.environment import Environment
from turnout.core.errors import ProviderError
from turnout.core.estimate import billed_usage
from turnout.core.streams import ResponseBuilder
from turnout.core.types import ChatRequest, ChatResponse, Usage
from turnout.ledger.pricing import Catalogue
from turnout.state import StateStore
from turnout.walk.affinity import Affinity
from turnout.walk.breakers import Breakers
from turnout.walk.entry import Candidate, Entry
from turnout.walk.hedge import Hedging
from turnout.walk.keys import KeyChoice, KeyPool
from turnout.walk.stats import Stats

#: The longest a Retry-After hint raises a backoff, and the longest cooldown a hint sets.
MAX_RETRY_AFTER_S = 30.0
MAX_COOLDOWN_S = 60.0
#: A cooldown without a hint.
DEFAULT_COOLDOWN_S = 10.0


def cooldown_seconds(hint: float | None) -> float:
    """How long a cooldown for a retry hint lasts: the hint (capped at 60 s), else 10 s (0 or less: none at all)."""
    return min(hint, MAX_COOLDOWN_S) if hint is not None else DEFAULT_COOLDOWN_S


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkContext:
    """One route's walks share this: its entries and settings, its state and the objects every call reaches.

    Attributes:
        entries: The materialised order.
        tries: Tries per entry (its retries plus one).
        base_backoff: The first backoff in seconds (it doubles after each sleep).
        store: Cooldown, key and breaker state.
        catalogue: Prices and context windows when a profile does not set them.
        env: The clock (cooldown deadlines, attempt start times), the sleep and the backoff's jitter.
        breakers: The entries' circuit breakers (None: none).
        stats: Calls in flight and times to first token per entry (None: not kept).
        hedging: Hedged requests (None: no hedging).
        affinity: Conversations' pins to pool members (None: none kept).
    """

    entries: tuple[Entry, ...]
    tries: int
    base_backoff: float
    store: StateStore
    catalogue: Catalogue
    env: Environment
    breakers: Breakers | None = None
    stats: Stats | None = None
    hedging: Hedging | None = None
    affinity: Affinity | None = None

    @property
    def single(self) -> bool:
        """The route has one entry (it never skips one)."""
        return len(self.entries) == 1

    @property
    def retries(self) -> int:
        """Retries per entry after its first try."""
        return self.tries - 1

    def context_window(self, entry: Entry, model: str) -> int | None:
        """The entry's context window: the profile's setting, else the catalogue's, else None."""
        if entry.context_window is not None:
            return entry.context_window
        return self.catalogue.context_window(entry.family, model)

    def billed(
        self,
        entry: Entry,
        model: str,
        request: ChatRequest,
        usage: Usage | None,
        delivered: ChatResponse | ResponseBuilder | None = None,
    ) -> Usage | None:
        """What an attempt on ``entry`` answering ``request`` is billed for the ``usage`` it reported.

        The one rule for every adapter's answer (:func:`~turnout.core.estimate.billed_usage`): bounded by the request's
        output bound (the entry's profile ``max_tokens`` when the request sets none) and the model's context
        window; ``delivered`` (a completed answer) is estimated when its usage is missing or unusable.
        """
        return billed_usage(
            request,
            usage,
            delivered,
            profile_max_tokens=entry.max_tokens,
            context_window=self.context_window(entry, model),
        )

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

    def cooling_until(self, entry: Entry, now: float) -> float | None:
        """When the entry's profile stops cooling down (profile cooldown, or every live key cooling)."""
        until = self.store.cooldown_until(entry.profile, now)
        if until is not None:
            return until
        return keys_cooling_until(entry.keys, now)

    def backoff_sleep(self, backoff: float, hint: float | None) -> float:
        """A jittered backoff (at least half of it), raised to the Retry-After hint (capped at 30 s)."""
        wait = backoff * (0.5 + 0.5 * self.env.jitter())
        if hint is not None:
            wait = max(wait, min(hint, MAX_RETRY_AFTER_S))
        return wait

    def cool_down(self, key: str, hint: float | None) -> Awaitable[None] | None:
        """Cool ``key`` down for the hint (capped at 60 s), else 10 s: the store's write to await.

        A zero hint asks for a cooldown that is over as it starts: nothing is written (None), so a shared
        store is not asked to keep a deadline that has already passed, and no coroutine is made for it.
        """
        seconds = cooldown_seconds(hint)
        if seconds > 0:
            return self.store.set_cooldown(key, self.env.clock() + seconds)
        return None

    def attempt(
        self,
        c: Candidate,
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
        """The record of one attempt on ``c`` (its cost is priced here)."""
        entry, model = c.entry, c.model
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
            entry=c.index,
            try_number=try_number,
            stream=stream,
            detail=detail,
            reason=reason,
        )


def keys_cooling_until(pool: KeyPool, now: float) -> float | None:
    """When the first key of a pool whose every live key is cooling down is free again (None: one is usable)."""
    if pool.rotates and not pool.all_dead() and not pool.has_usable(now):
        return pool.soonest_key_free(now)
    return None
