"""Attempt records, requested-versus-served routes, fallback notices, and the dispatch scope.

Every call has its own :class:`DispatchScope`, which its caller hands to the reliable walk explicitly (so
concurrent calls never mix their records). The walk appends one :class:`Attempt` per physical call or skip;
the walk returns the route that answered, and the caller (:class:`turnout.call.Call`) commits it only once it
accepts the answer, so a rejected answer never leaves a stale fallback notice.

No record here holds prompt, response or provider error text, or a key: keys are named by key id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from turnout.core.types import Usage

Outcome: TypeAlias = Literal[
    "ok",
    "retryable",
    "rate_limited",
    "rate_limited_non_retryable",
    "non_retryable",
    "context_window",
    "refusal",
    "timeout",
    "empty",
    "cooldown_skip",
    "breaker_skip",
    "hedge_lost",
    "stream_interrupted",
    "cancelled",
]

#: Outcomes of an entry skipped without a call (it was cooling down, or its circuit breaker was open): no cost,
#: no latency, and no failure of the provider's own.
SKIPS: frozenset[str] = frozenset(("cooldown_skip", "breaker_skip"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One physical provider call, or one skip (cooldown or circuit breaker).

    Attributes:
        provider: The profile, ``family.alias``.
        model: The model sent (the pin for a pinned entry).
        outcome: ``ok`` or the failure's class (``cooldown_skip`` or ``breaker_skip`` for a skipped entry).
        status: HTTP status when the provider answered.
        key_id: First 8 hex digits of the SHA-256 of the key used.
        usage: Usage reported by this attempt (rejected attempts keep theirs here).
        cost_usd: Cost of this attempt; None when the price is unknown.
        started_at: Wall-clock start (Unix seconds).
        duration_ms: How long the attempt took.
        ttft_ms: Time to the first streamed token (streams), when known.
        retry_after: The provider's retry hint, or the remaining cooldown for a skip, in seconds.
        entry: Index of the entry in the walk.
        try_number: 1-based try on this entry (0 for a cooldown skip).
        stream: Whether the attempt streamed.
        detail: A content-free tag (``timeout:idle``, ``stream_truncated``, ``key_cooldown`` ...).
        reason: What a person can act on, when known (:func:`turnout.core.describe.failure_reason`): a rejected
            request's own reason from the provider (a 4xx, scrubbed of keys, at most 200 characters) or the
            address a connection failed to reach. Never written to the ledger.
    """

    provider: str
    model: str
    outcome: Outcome
    status: int | None = None
    key_id: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    started_at: float = 0.0
    duration_ms: float = 0.0
    ttft_ms: float | None = None
    retry_after: float | None = None
    entry: int = 0
    try_number: int = 1
    stream: bool = False
    detail: str | None = None
    reason: str | None = None

    @property
    def family(self) -> str:
        """The family part of :attr:`provider`."""
        return self.provider.partition(".")[0]


#: Another name for :class:`Attempt`, which the reliable walk still builds its records through.
new_attempt = Attempt


def total_cost(attempts: Iterable[Attempt]) -> float | None:
    """What a call's attempts cost together: the sum of every known price (None when none is known)."""
    costs = [a.cost_usd for a in attempts if a.cost_usd is not None]
    return sum(costs) if costs else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteRef:
    """A (profile, model) pair: what was requested, or what served."""

    provider: str
    model: str

    @property
    def family(self) -> str:
        """The family part of :attr:`provider`."""
        return self.provider.partition(".")[0]


NOTICE_TEMPLATE = (
    "⚡ {requested_model} ({requested_provider}) was unavailable; "
    "this reply was served by {served_model} ({served_provider})."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackNotice:
    """Tells the user that another backend answered.

    Attributes:
        requested: What the caller asked for.
        served: What produced the accepted answer.
        text: The notice, ``⚡ … was unavailable; this reply was served by ….``
        cross_family: The families differ.
        shown: Whether channel-style surfaces should show it (always across families; within one family
            only with ``[notices] intra_family = true``).
    """

    requested: RouteRef
    served: RouteRef
    text: str
    cross_family: bool
    shown: bool


#: The notices made so far, by route pair and setting (a notice's text is formatted once per pair). Bounded:
#: cleared when full.
_notices: dict[tuple[str, str, str, str, bool], FallbackNotice] = {}


def fallback_notice(requested: RouteRef, served: RouteRef, *, intra_family: bool = False) -> FallbackNotice:
    """The notice for a fallback from ``requested`` to ``served`` (a route pair's notice is made once)."""
    key = (requested.provider, requested.model, served.provider, served.model, intra_family)
    notice = _notices.get(key)
    if notice is None:
        if len(_notices) >= 256:
            _notices.clear()
        notice = _notices[key] = _notice(requested, served, intra_family)
    return notice


def _notice(requested: RouteRef, served: RouteRef, intra_family: bool) -> FallbackNotice:
    cross = requested.family != served.family
    return FallbackNotice(
        requested=requested,
        served=served,
        text=NOTICE_TEMPLATE.format(
            requested_model=requested.model,
            requested_provider=requested.provider,
            served_model=served.model,
            served_provider=served.provider,
        ),
        cross_family=cross,
        shown=cross or intra_family,
    )


@dataclass(slots=True, eq=False)
class DispatchScope:
    """The attempt records of one logical call (a chat, a stream, a turn), in order.

    A client's :class:`turnout.call.Call` is the scope of its own attempts (a subclass); scopes are told apart by
    identity, never compared.

    Attributes:
        attempts: Every attempt, in order.
        call_id: The call's id (it tells one call from another where a rule needs two calls to agree).
        abandoned: The caller gave up on the call: the try under way may end, and the walk starts no other.
    """

    attempts: list[Attempt] = field(default_factory=list)
    call_id: str | None = None
    abandoned: bool = False

    def add(self, attempt: Attempt) -> None:
        """Record one attempt."""
        self.attempts.append(attempt)
