"""``GET /status`` and the shape of ``GET /v1/models``: what the gateway serves and how its upstreams are doing.

``/status`` shows the profiles and routes, current cooldowns with their remaining seconds, each
profile's prompt caching (input and cached input tokens, the hit rate and the money the cache saved), dead keys by
id, the rate-limit headroom each profile and key last announced, the circuit breakers that are not closed (open
until a time, or half-open), attempt counts per outcome over a recent window, each pool's members with their
load (calls in flight, moving time to first token, share of the pool's calls), what hedging did (whether it is on,
calls that could hedge, hedges sent, the hedge rate, who answered first, the budget left), and the workers whose
totals it merges (:mod:`turnout.gateway.workers`: with ``turnout serve --workers N``, it describes the whole server).
``/v1/models`` lists what the caller's key may put in ``model`` (which names those are is
:mod:`turnout.gateway.access`'s decision); each key's list is encoded once, since the configuration does not
change while the gateway runs.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import orjson

from turnout.config import Config, default_target
from turnout.config.graph import pool_specs
from turnout.core.attribution import Attempt
from turnout.core.errors import ConfigError
from turnout.gateway.metrics import cache_by_profile
from turnout.gateway.workers import LAST_ATTEMPTS, Totals
from turnout.state.dead_keys import describe_dead_keys
from turnout.walk.breakers import describe_breakers
from turnout.walk.hedge import hedging_status
from turnout.walk.pools import pools_status

#: How far back ``/status`` counts attempts, and the width of one counting bucket.
RECENT_WINDOW_S = 900
BUCKET_S = 60

_PROVIDER_OUTCOME = attrgetter("provider", "outcome")
#: A profile's prompt-cache totals before it answered anything.
_NO_CACHE: dict[str, float | None] = {
    "input_tokens": 0,
    "cached_input_tokens": 0,
    "cache_write_tokens": 0,
    "hit_rate": None,
    "saved_usd": 0.0,
}


class RecentAttempts:
    """Attempt counts per (profile, outcome) over the last :data:`RECENT_WINDOW_S` seconds, in minute buckets.

    Attributes:
        last: The last :data:`~turnout.gateway.workers.LAST_ATTEMPTS` attempts (the status page lists them).
    """

    __slots__ = ("_buckets", "_clock", "last")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._buckets: dict[int, Counter[tuple[str, str]]] = {}
        self.last: deque[Attempt] = deque(maxlen=LAST_ATTEMPTS)

    def add(self, attempts: Iterable[Attempt], now: float | None = None) -> None:
        """Count the attempts of one call (that ended at ``now``, default: the clock's time)."""
        counts = self._bucket(int((self._clock() if now is None else now) // BUCKET_S))
        for a in attempts:
            key = (a.provider, a.outcome)
            counts[key] = counts.get(key, 0) + 1
        self.last.extend(attempts)

    def fold(self, calls: Sequence[Sequence[Attempt]], ends: Sequence[float]) -> None:
        """Count the attempts of calls in order, each of which ended at the time ``ends`` holds for it.

        Calls that all ended within one bucket (nearly every batch) are counted in C, with ``Counter.update``.
        """
        if not ends:
            return
        bucket = int(min(ends) // BUCKET_S)
        if int(max(ends) // BUCKET_S) != bucket:  # the batch spans buckets: call by call
            for attempts, now in zip(calls, ends, strict=True):
                self.add(attempts, now)
            return
        attempts = list(chain.from_iterable(calls))
        self._bucket(bucket).update(map(_PROVIDER_OUTCOME, attempts))
        self.last.extend(attempts)

    def _bucket(self, bucket: int) -> Counter[tuple[str, str]]:
        """The counts of ``bucket``; a new bucket drops those that left the window."""
        counts = self._buckets.get(bucket)
        if counts is None:
            oldest = bucket - RECENT_WINDOW_S // BUCKET_S
            for b in [b for b in self._buckets if b <= oldest]:
                del self._buckets[b]
            counts = self._buckets[bucket] = Counter()
        return counts

    def buckets(self) -> dict[int, dict[tuple[str, str], int]]:
        """A copy of the counts per minute bucket (what :class:`~turnout.gateway.workers.Totals` carries)."""
        return {b: dict(counts) for b, counts in self._buckets.items()}

    def snapshot(self, buckets: Mapping[int, Mapping[tuple[str, str], int]] | None = None) -> dict[str, Any]:
        """``{"window_seconds", "by_outcome": {outcome: n}, "by_provider": {profile: {outcome: n}}}``.

        Args:
            buckets: The counts to summarise (default: this process's; the server's merged ones with workers).
        """
        oldest = int(self._clock() // BUCKET_S) - RECENT_WINDOW_S // BUCKET_S
        total: Counter[tuple[str, str]] = Counter()
        for b, counts in (self._buckets if buckets is None else buckets).items():
            if b > oldest:
                total.update(counts)
        by_outcome: Counter[str] = Counter()
        by_provider: dict[str, dict[str, int]] = {}
        for (provider, outcome), n in sorted(total.items()):
            by_outcome[outcome] += n
            by_provider.setdefault(provider, {})[outcome] = n
        return {
            "window_seconds": RECENT_WINDOW_S,
            "by_outcome": dict(sorted(by_outcome.items())),
            "by_provider": by_provider,
        }


def status_payload(
    config: Config,
    totals: Totals,
    recent: RecentAttempts,
    *,
    draining: bool,
    started: float,
    now: float,
    money: Mapping[str, Any] | None = None,
) -> bytes:
    """The ``/status`` body, from the totals of this process or of every worker (``totals.workers``).

    Args:
        config: The gateway's configuration.
        totals: What the gateway counted and knows (:meth:`turnout.gateway.app.Gateway.view`).
        recent: The gateway's recent-attempt counter (its window's clock).
        draining: Whether the answering process drains.
        started: When the answering process started (wall-clock seconds).
        now: The state store's time (cooldowns and breakers are relative to it).
        money: The ledger's health (``ledger``) and each limited key's spend and limits (``keys``).
    """
    cooldowns = _cooldowns(totals.cooldowns, now)
    profiles = _profiles(config, totals, {c["profile"] for c in cooldowns if c["key_id"] is None})
    return orjson.dumps(
        {
            "status": "draining" if draining else "ok",
            "uptime_seconds": round(time.time() - started, 3),
            "in_flight": totals.in_flight,
            "workers": [
                {"worker": w.name, "age_seconds": w.age, "in_flight": w.in_flight, "requests": w.requests}
                for w in totals.workers
            ],
            "default_provider": _default(config),
            "state_backend": config.state.backend,
            "profiles": profiles,
            "routes": [
                {"hint": f"hint:{r.hint}", "provider": r.model_provider, "model": r.model} for r in config.model_routes
            ],
            "cooldowns": cooldowns,
            "dead_keys": describe_dead_keys(totals.keys.values(), now),
            "headroom": list(totals.headroom),
            "breakers": describe_breakers(totals.breakers, now),
            "pools": pools_status(pool_specs(config).values(), totals.pools),
            "hedging": hedging_status(totals.hedging),
            "recent_attempts": recent.snapshot(totals.recent),
            **(money or {"ledger": None, "keys": []}),
        }
    )


def _cooldowns(cooldowns: Mapping[str, float], now: float) -> list[dict[str, Any]]:
    """The cooldowns in effect, by key: a whole profile's (``key_id`` None) or one of its keys', with the time left."""
    out = []
    for key, until in sorted(cooldowns.items()):
        profile, _, kid = key.partition("#")
        out.append({"key": key, "profile": profile, "key_id": kid or None, "remaining_seconds": round(until - now, 3)})
    return out


def _profiles(config: Config, totals: Totals, cooling: set[str]) -> list[dict[str, Any]]:
    """Each profile: its models and fallbacks, whether it cools down (``cooling``), and its prompt-cache totals."""
    cache = cache_by_profile(totals.counters)
    return [
        {
            "name": name,
            "model": p.model,
            "fallback_models": list(p.fallback_models),
            "fallback": list(p.fallback),
            "cooling_down": name in cooling,
            "cache": cache.get(name, _NO_CACHE),
        }
        for name, p in config.profiles().items()
    ]


def _default(config: Config) -> str | None:
    try:
        return default_target(config)
    except ConfigError:
        return None
