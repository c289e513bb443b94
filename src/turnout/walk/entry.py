"""The entries of a walk, and the small values a walk hands around.

An :class:`Entry` is one (profile, model) step of a materialised route, with its adapters (one per key),
its key pool and the profile's overrides. :class:`Served` is a complete answer and the entry it came from;
:class:`Resume` says where a non-streaming recovery continues after a stream gave no answer; a walk's
:class:`ContextLimits` are what context-window failures taught it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from turnout.core.attribution import RouteRef
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatResponse, Message
from turnout.ledger.pricing import Rates
from turnout.walk.breaker import entry_key
from turnout.walk.keys import KeyPool
from turnout.walk.stats import Stats


class PoolOrder(Protocol):
    """A pool of interchangeable profiles: the order its members are tried in, for one call."""

    name: str

    @property
    def weights(self) -> Mapping[str, float]:
        """Each member's weight (1 when not given): its share of the conversations (:mod:`turnout.walk.affinity`)."""

    def arrange(self, members: Sequence[str], stats: Stats | None) -> Sequence[str]:
        """``members`` (profiles, in configured order) in the order this call tries them."""


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
        max_tokens: The profile's ``max_tokens`` (the output bound of a request that sets none).
        rates: The profile's ``pricing`` override.
        pool: The pool the entry's profile stands in for (its members are tried in the pool's order).
    """

    profile: str
    model: str | None
    providers: tuple[Provider, ...]
    keys: KeyPool
    refusal_fallback: bool = False
    context_window: int | None = None
    max_tokens: int | None = None
    rates: Rates | None = None
    pool: PoolOrder | None = None
    #: The family part of :attr:`profile`.
    family: str = field(init=False)
    _route: RouteRef | None = field(init=False, repr=False, compare=False)
    _health_key: str = field(init=False, repr=False, compare=False)
    #: The catalogue's rates of the model it last priced (a lookup saved on every call).
    priced: tuple[str, Rates | None] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.family = self.profile.partition(".")[0]
        self._route = None
        self._health_key = ""
        self.priced = None

    @property
    def pinned(self) -> bool:
        """Whether the entry forces its model."""
        return self.model is not None

    def model_for(self, requested: str) -> str:
        """The model this entry sends for a request asking for ``requested``."""
        return self.model if self.model is not None else requested

    def route(self, model: str) -> RouteRef:
        """This entry's route for the model it serves (the last one is kept: calls rarely change models)."""
        route = self._route
        if route is None or route.model != model:
            route = self._route = RouteRef(provider=self.profile, model=model)
            self._health_key = entry_key(self.profile, model)
        return route

    def health_key(self, model: str) -> str:
        """The key of this entry's circuit breaker for the model it serves: ``family.alias/model``."""
        route = self._route
        if route is None or route.model != model:
            self.route(model)
        return self._health_key

    def capabilities(self, requested: str | None = None) -> Capabilities:
        """The capabilities of this entry's model."""
        model = self.model if self.model is not None else requested
        return self.providers[0].capabilities(model)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One entry as a call's walk takes it: its place in the route's entries, the entry, and the model it sends.

    Attributes:
        index: The entry's index in the route's entries (its attempts' ``entry``).
        entry: The entry.
        model: The model it is sent (its pin, else the caller's model).
    """

    index: int
    entry: Entry
    model: str


class Served(NamedTuple):
    """A complete answer of the walk and the entry that produced it.

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
    """Where a non-streaming recovery of a failed stream continues.

    Attributes:
        entry: The entry whose stream failed.
        tries: How many tries that entry gets: 0 skips it, 1 is one recovery attempt on it.
        limits: What the stream learned about context windows.
    """

    entry: int
    tries: int
    limits: ContextLimits | None = None


def pool_blocks(entries: Sequence[Entry]) -> list[tuple[tuple[int, ...], PoolOrder | None]] | None:
    """Runs of consecutive entries standing for one pool, and the entries between them (None: no pool)."""
    if all(e.pool is None for e in entries):
        return None
    blocks: list[tuple[list[int], PoolOrder | None]] = []
    for i, e in enumerate(entries):
        if blocks and blocks[-1][1] is e.pool:
            blocks[-1][0].append(i)
        else:
            blocks.append(([i], e.pool))
    return [(tuple(indices), pool) for indices, pool in blocks]


def has_images(messages: Sequence[Message]) -> bool:
    """Whether any message carries an image."""
    return any(type(m.content) is not str and m.images for m in messages)
