"""Pools: interchangeable profiles, and the order in which one call tries their members.

A pool (``[pools.<name>]``) stands wherever a profile can. The graph (:mod:`turnout.config.graph`) lays its
members' entries side by side, each marked with the pool; the factory gives each walk one :class:`Pool` per
pool it holds, and the walk asks it, once per call, in which order the members are tried
(:meth:`Pool.arrange`, the walk's :class:`~turnout.walk.reliable.PoolOrder`). Everything else is the walk's as
for any entry: retries, cooldowns, circuit breakers and key rotation per member, then the pool's fallbacks.

Strategies (all cheap: no I/O, a few comparisons per member):

- ``ordered``: the configured order (a pool written as a fallback list).
- ``weighted``: a random order in which each member comes first with a probability proportional to its
  weight, and so on down the order (weighted sampling without replacement, Efraimidis and Spirakis). A member
  of weight 0 comes after every positive one.
- ``least_busy``: fewest tries in flight first (in this process), ties in random order.
- ``latency``: lowest moving average time to first token first (:class:`~turnout.walk.stats.EntryStats`). A member
  never tried comes first, so each one is measured; one tried and never answered comes last. With probability
  ``explore`` a random other member goes first, so a member that recovered (or the one that slowed) is
  measured again.

The load and speed a pool reads come from :class:`~turnout.walk.stats.Stats`, by entry (``family.alias/model``): a
member is judged by its entry in the tier being arranged (its primary model in the first tier; see
:mod:`turnout.config.graph`); a member that forwards the caller's model by every model this process sent it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnout.config.schema import PoolStrategy

if TYPE_CHECKING:
    from turnout.config.graph import PoolSpec
    from turnout.walk.entry import Entry
    from turnout.walk.stats import EntryStats, Stats

#: ``latency``: the share of calls that try a random other member first (``[pools.<name>] explore``).
DEFAULT_EXPLORE = 0.05

_NO_PEERS: frozenset[int] = frozenset()


class Pool:
    """The order of a pool's members for one call (a :class:`~turnout.walk.reliable.PoolOrder`).

    Args:
        name: The pool's name.
        strategy: ``ordered``, ``weighted``, ``least_busy`` or ``latency``.
        keys: Per member, the stats keys (``family.alias/model``) of its entries this pool arranges (the factory
            gives one pool per tier of the walk: one entry per member); None for a member whose entry forwards
            the caller's model.
        weights: ``weighted``: each member's weight (1 when not given).
        explore: ``latency``: the share of calls that try a random other member first.
        chance: A uniform random number in [0, 1) (tests inject a fixed sequence).
    """

    __slots__ = ("_chance", "_found", "_keys", "_source", "explore", "name", "strategy", "weights")

    def __init__(
        self,
        name: str,
        strategy: PoolStrategy,
        *,
        keys: Mapping[str, Sequence[str] | None],
        weights: Mapping[str, float] | None = None,
        explore: float = DEFAULT_EXPLORE,
        chance: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self.strategy = strategy
        self.weights = dict(weights or {})
        self.explore = explore
        self._keys = dict(keys)
        self._chance = chance
        self._source: Stats | None = None
        self._found: dict[str, list[EntryStats]] = {}

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, {self.strategy!r})"

    def arrange(self, members: Sequence[str], stats: Stats | None) -> Sequence[str]:
        """``members`` (in configured order) in the order this call tries them.

        Without ``stats``, ``least_busy`` and ``latency`` keep the configured order.
        """
        strategy = self.strategy
        if strategy == "ordered" or len(members) < 2:
            return members
        if strategy == "weighted":
            return self._weighted(members)
        if stats is None:
            return members
        if strategy == "least_busy":
            chance = self._chance
            return sorted(members, key=lambda m: (sum(s.in_flight for s in self._stats(m, stats)), chance()))
        return self._fastest(members, stats)

    def _weighted(self, members: Sequence[str]) -> list[str]:
        chance, weights = self._chance, self.weights

        def key(member: str) -> float:
            weight = weights.get(member, 1.0)
            return chance() ** (1.0 / weight) if weight > 0 else -1.0

        return sorted(members, key=key, reverse=True)

    def _fastest(self, members: Sequence[str], stats: Stats) -> list[str]:
        ordered = sorted(members, key=lambda m: speed(self._stats(m, stats), pinned=self._keys.get(m) is not None))
        if self.explore and self._chance() < self.explore:
            pick = 1 + min(int(self._chance() * (len(ordered) - 1)), len(ordered) - 2)
            ordered.insert(0, ordered.pop(pick))
        return ordered

    def _stats(self, member: str, stats: Stats) -> list[EntryStats]:
        """The member's entries' stats: its keys in this walk, or every model sent to an unpinned member."""
        if stats is not self._source:
            self._source = stats
            self._found.clear()
        found = self._found.get(member)
        if found is not None:
            return found
        keys = self._keys.get(member)
        if keys is None:  # forwards the caller's model: the models it was sent so far (not cached: more may come)
            return of_member(member, stats)
        found = self._found[member] = [stats.of(k) for k in keys]  # EntryStats live as long as ``stats``
        return found


def speed(entries: Sequence[EntryStats], *, pinned: bool) -> float:
    """A member's rank under ``latency``, in seconds: lower goes first.

    A pinned member is judged by its first entry; an unpinned one by the moving averages of every model it was
    sent, weighted by their calls. Never tried: 0 (try it now); tried and never answered: infinity (last).
    """
    if pinned:  # the common case, per member per call: no sums
        first = entries[0]
        avg = first.ttft_avg
        if avg is not None:
            return avg
        return 0.0 if first.calls == 0 else math.inf
    calls = sum(s.calls for s in entries)
    measured = [(s.calls, s.ttft_avg) for s in entries if s.ttft_avg is not None]
    if not measured:
        return 0.0 if calls == 0 else math.inf
    weight = sum(max(c, 1) for c, _ in measured)
    return sum(max(c, 1) * avg for c, avg in measured) / weight


def of_member(member: str, stats: Stats) -> list[EntryStats]:
    """The stats of every entry of profile ``member`` this process has seen (any model)."""
    prefix = member + "/"
    return [s for key, s in stats.known().items() if key.startswith(prefix)]


def leading_members(entries: Sequence[Entry]) -> frozenset[int]:
    """Indices of the entries that answer as the route itself: each member's first entry, when a pool leads.

    An answer from one of them is no fallback (the members are interchangeable); an answer from a member's
    other models or from the pool's fallbacks is. Empty when the walk does not start with a pool.
    """
    pool = entries[0].pool
    if pool is None:
        return _NO_PEERS
    out: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.pool is not pool:
            break
        out.setdefault(entry.profile, i)
    return frozenset(out.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberLoad:
    """What this process sent one pool member (for ``/status``, ``/metrics`` and ``turnout status``).

    Attributes:
        member: The profile, ``family.alias``.
        in_flight: Tries under way now (every model of the profile).
        calls: Tries started since the process began.
        share: Its part of the tries started on the pool's members (None before any).
        ttft_ms: Moving average time to first token of its most used model, in milliseconds (None until one).
    """

    member: str
    in_flight: int
    calls: int
    share: float | None
    ttft_ms: float | None


def member_loads(members: Iterable[str], stats: Stats | None) -> list[MemberLoad]:
    """The load of each member, in the order given (zeros without ``stats``)."""
    rows: list[tuple[str, list[EntryStats]]] = [(m, of_member(m, stats) if stats is not None else []) for m in members]
    total = sum(s.calls for _, found in rows for s in found)
    out = []
    for member, found in rows:
        calls = sum(s.calls for s in found)
        main = max(found, key=lambda s: s.calls, default=None)
        avg = main.ttft_avg if main is not None else None
        out.append(
            MemberLoad(
                member=member,
                in_flight=sum(s.in_flight for s in found),
                calls=calls,
                share=calls / total if total else None,
                ttft_ms=avg * 1000.0 if avg is not None else None,
            )
        )
    return out


def pool_loads(specs: Iterable[PoolSpec], stats: Stats | None) -> list[tuple[str, MemberLoad]]:
    """``(pool, member's load)`` for every member of every pool (``/metrics``)."""
    return [(spec.name, load) for spec in specs for load in member_loads(spec.members, stats)]


def merge_loads(rows: Iterable[tuple[str, MemberLoad]]) -> list[tuple[str, MemberLoad]]:
    """Several processes' ``(pool, member's load)`` rows as one server's, in first-seen order.

    Calls and calls in flight sum; the time to first token is the average of the processes' averages weighted by
    their calls; each member's share is taken again of its pool's summed calls.
    """
    summed: dict[tuple[str, str], tuple[int, int, float, int]] = {}
    for pool, load in rows:
        busy, calls, weighted, timed = summed.get((pool, load.member), (0, 0, 0.0, 0))
        if load.ttft_ms is not None:
            weight = max(load.calls, 1)
            weighted, timed = weighted + load.ttft_ms * weight, timed + weight
        summed[(pool, load.member)] = (busy + load.in_flight, calls + load.calls, weighted, timed)
    totals: dict[str, int] = {}
    for (pool, _), (_, calls, _, _) in summed.items():
        totals[pool] = totals.get(pool, 0) + calls
    return [
        (
            pool,
            MemberLoad(
                member=member,
                in_flight=busy,
                calls=calls,
                share=calls / totals[pool] if totals[pool] else None,
                ttft_ms=weighted / timed if timed else None,
            ),
        )
        for (pool, member), (busy, calls, weighted, timed) in summed.items()
    ]


def pools_status(specs: Iterable[PoolSpec], loads: Iterable[tuple[str, MemberLoad]]) -> list[dict[str, object]]:
    """Each pool with its strategy, fallbacks and members' load: ``/status`` and ``turnout status``.

    ``loads``: the rows of :func:`pool_loads` (of this process, or merged by :func:`merge_loads`).
    """
    found = {(pool, load.member): load for pool, load in loads}
    out: list[dict[str, object]] = []
    for spec in specs:
        members = []
        for member, weight in zip(spec.members, spec.weights, strict=True):
            load = found.get((spec.name, member)) or MemberLoad(
                member=member, in_flight=0, calls=0, share=None, ttft_ms=None
            )
            members.append(
                {
                    "profile": load.member,
                    "weight": weight,
                    "in_flight": load.in_flight,
                    "calls": load.calls,
                    "share": round(load.share, 4) if load.share is not None else None,
                    "ttft_ms": round(load.ttft_ms, 1) if load.ttft_ms is not None else None,
                }
            )
        out.append({"name": spec.name, "strategy": spec.strategy, "fallback": list(spec.fallback), "members": members})
    return out
