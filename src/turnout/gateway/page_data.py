"""What the status page shows, gathered from the gateway's totals, its routes and the ledger.

Everything here is read at page time from what the gateway already keeps: the whole server's
:class:`~turnout.gateway.workers.Totals` (state of every entry, the last attempts), the client's routes, and
today's totals from the ledger (:func:`turnout.ledger.writer.day_summary`, read in a thread at most every
:data:`LEDGER_REFRESH_S` seconds and bounded by :data:`LEDGER_TIMEOUT_S`). Nothing here runs on a request of the
API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.client import Client
from turnout.core.attribution import Attempt
from turnout.core.errors import ConfigError
from turnout.gateway.spend import day_start
from turnout.gateway.workers import Totals
from turnout.ledger.writer import DaySummary, Ledger, day_summary
from turnout.state.base import BreakerRecord
from turnout.state.dead_keys import DEAD_STATES
from turnout.walk.breaker import entry_key, gate

log = logging.getLogger("turnout.gateway")

#: How long today's ledger totals are reused before the ledger is read again.
LEDGER_REFRESH_S = 5.0
#: The longest a page waits for the ledger.
LEDGER_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyView:
    """One credential of an entry's profile and what holds it back (nothing, when it is usable).

    Attributes:
        key_id: The key's id (never the key).
        cooling_until: The end of the key's own cooldown (a rate limit, or no headroom left).
        dead: ``dead``, ``probe_due`` or ``probing`` when the provider rejected it; else None.
        dead_until: When a dead key's rest ends.
    """

    key_id: str
    cooling_until: float | None = None
    dead: str | None = None
    dead_until: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryView:
    """One entry of a route: a profile and the model it sends, with its state.

    Attributes:
        profile: ``family.alias``.
        model: The pinned model; None for an entry that sends the caller's model.
        cooling_until: The end of the profile's cooldown.
        breaker: ``open`` or ``half_open`` (None: closed).
        breaker_until: When an open breaker lets a probe through.
        keys: The profile's credentials.
        headroom: The headroom rows of the profile (one per key that announced its rate limits).
    """

    profile: str
    model: str | None
    cooling_until: float | None = None
    breaker: str | None = None
    breaker_until: float | None = None
    keys: tuple[KeyView, ...] = ()
    headroom: tuple[Mapping[str, Any], ...] = ()

    @property
    def healthy(self) -> bool:
        """Nothing holds the entry back (a dead or cooling key of several is not the entry's state)."""
        usable = not self.keys or any(k.dead is None and k.cooling_until is None for k in self.keys)
        return self.cooling_until is None and self.breaker is None and usable


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteView:
    """A route and its entries in the order a call walks them.

    Attributes:
        name: ``default``, ``hint:<name>``, or a profile that no route reaches.
        entries: Its entries.
    """

    name: str
    entries: tuple[EntryView, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PageData:
    """Everything the page renders.

    Attributes:
        now: The time of the page (wall-clock seconds).
        uptime: Seconds since the answering process started.
        workers: The workers counted.
        in_flight: Requests in flight across them.
        state_backend: ``memory`` or ``redis``.
        routes: The default route, then every hint route.
        last: The last attempts, newest first.
        recent: Attempt counts per outcome over the recent window.
        ledger: Whether the gateway keeps a ledger.
        day: Today's totals (UTC); None with the ledger off, or when it could not be read in time.
        pools: The pool rows of the client's status (empty when the configuration has none).
        hedging: What hedging did, as ``/status`` shows it (None: no profile hedges).
        cache: Each profile's prompt caching, as ``/status`` shows it (only profiles that answered with input).
        signed_in: Whether the page was opened with a session cookie (it offers to sign out).
        money: The ledger's health and each limited key's spend, as ``/status`` shows them (None: not known).
    """

    now: float
    uptime: float
    workers: int
    in_flight: int
    state_backend: str
    routes: tuple[RouteView, ...]
    last: tuple[Attempt, ...]
    recent: Mapping[str, int]
    ledger: bool
    day: DaySummary | None = None
    pools: tuple[Mapping[str, Any], ...] = ()
    hedging: Mapping[str, Any] | None = None
    cache: Mapping[str, Mapping[str, float | None]] | None = None
    signed_in: bool = False
    money: Mapping[str, Any] | None = None


def route_views(client: Client, totals: Totals, now: float) -> tuple[RouteView, ...]:
    """Each route with the state of each entry in ``totals`` at ``now``.

    The default route and each hint route, then each profile no route reaches (a client may still name it).
    """
    router = client.factory.router()
    walks = [("default", router.default), *((f"hint:{hint}", walk) for hint, (walk, _) in router.routes.items())]
    listed = {e.profile for _, walk in walks for e in walk.entries}
    for name in client.config.profiles():
        if name not in listed:
            try:
                walk = client.factory.router(profile=name).default
            except ConfigError:  # a profile that cannot be a call's first entry (no model to send)
                continue
            walks.append((name, walk))
            listed.update(e.profile for e in walk.entries)
    dead = {h.key_id: h for h in totals.keys.values() if h.state(now) in DEAD_STATES}
    routes = []
    for name, walk in walks:
        entries = []
        for e in walk.entries:
            keys = tuple(
                KeyView(
                    key_id=kid,
                    cooling_until=totals.cooldowns.get(f"{e.profile}#{kid}"),
                    dead=dead[kid].state(now) if kid in dead else None,
                    dead_until=dead[kid].dead_until if kid in dead else None,
                )
                for kid in e.keys.ids
            )
            breaker = _breaker(totals, e.profile, e.model)
            entries.append(
                EntryView(
                    profile=e.profile,
                    model=e.model,
                    cooling_until=totals.cooldowns.get(e.profile),
                    breaker=gate(breaker, now).value if breaker is not None else None,
                    breaker_until=breaker.until if breaker is not None else None,
                    keys=keys,
                    headroom=tuple(r for r in totals.headroom if r.get("profile") == e.profile),
                )
            )
        routes.append(RouteView(name=name, entries=tuple(entries)))
    return tuple(routes)


def _breaker(totals: Totals, profile: str, model: str | None) -> BreakerRecord | None:
    """The open breaker of an entry (for one that sends the caller's model: the latest of its models')."""
    if model is not None:
        return totals.breakers.get(entry_key(profile, model))
    prefix = entry_key(profile, "")
    records = [r for key, r in totals.breakers.items() if key.startswith(prefix)]
    return max(records, key=lambda r: r.until, default=None)


class LedgerDay:
    """Today's (UTC) totals from the ledger, read in a thread and reused for :data:`LEDGER_REFRESH_S` seconds.

    Args:
        ledger: The client's ledger.
        clock: Wall-clock seconds.
    """

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock
        self._day: DaySummary | None = None
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def read(self) -> DaySummary | None:
        """Today's totals (None when the ledger cannot be read in time; the page says so)."""
        async with self._lock:  # one read at a time; the others reuse its result
            now = self.clock()
            if self._day is not None and now - self._read_at < LEDGER_REFRESH_S and self._day.since == day_start(now):
                return self._day
            try:
                async with asyncio.timeout(LEDGER_TIMEOUT_S):
                    await self.ledger.flush()
                    self._day = await asyncio.to_thread(day_summary, self.ledger.path, day_start(now))
            except Exception:  # an unreadable ledger must not take the page down
                log.warning("turnout gateway: cannot read today's totals from the ledger", exc_info=True)
                return None
            self._read_at = now
            return self._day


def newest_first(attempts: Sequence[Attempt]) -> tuple[Attempt, ...]:
    """The attempts, newest first."""
    return tuple(sorted(attempts, key=lambda a: a.started_at, reverse=True))
