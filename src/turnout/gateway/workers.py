"""One server's workers seen as one: their totals merged for ``/metrics``, ``/status`` and the status page.

``turnout serve --workers N`` runs N processes on one port and the kernel hands each connection to one of them,
so what one process counts is its share of the server's. Each worker publishes its totals (:class:`Totals`)
every :data:`INTERVAL_S` seconds as a small JSON file in a directory the parent process created for the server
(one file per worker, replaced atomically), from a timer: the request path still only updates dicts. The worker
that answers a scrape reads the other workers' files, keeps those written in the last :data:`MAX_AGE_S` seconds
(a worker that stopped writing, or died, stops counting then) and merges them with its own live totals
(:func:`merge`):

- counters sum; histograms sum bucket by bucket; requests in flight sum;
- the recent attempts of ``/status`` sum per minute bucket; the last attempts are the newest of every worker;
- cooldowns, dead keys and open breakers are the union (the later deadline, the stronger dead-key record, the
  later opening). With ``[state] backend = "redis"`` every worker already holds the shared state, so the union
  changes nothing; with the memory store each worker has its own, and the union shows every worker's;
- breaker transitions sum; rate-limit headroom: the newest reading per profile and key wins;
- pool members' calls and calls in flight sum, their times to first token average weighted by calls
  (:func:`turnout.walk.pools.merge_loads`);
- hedging's counts sum, and so do the budgets left: each worker has its own token bucket, so the sum is how many
  hedges the server may send now.

A worker removes its file when it stops, the parent removes the directory when the last worker is gone, and a
single-process gateway has no directory at all: its totals are its own and nothing is written.

The parent supervises the workers: one that dies is started again (:class:`RestartBudget` bounds how often),
and the parent writes how many it restarted to the directory's ``restarts`` file (:func:`publish_restarts`),
which every worker reads with the other workers' totals, so ``/metrics`` counts it whichever worker answers.
A dead worker's totals leave the merge once they are :data:`MAX_AGE_S` old: the server's counters then drop by
what it had counted, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

import orjson

from turnout.core.attribution import Attempt, Outcome
from turnout.state.base import BreakerRecord
from turnout.state.dead_keys import KeyHealth, stronger
from turnout.state.dead_keys import decode as decode_key
from turnout.walk.hedge import HedgeTally
from turnout.walk.pools import MemberLoad, merge_loads

log = logging.getLogger("turnout.gateway")

#: How often a worker publishes its totals.
INTERVAL_S = 1.0
#: A worker's totals older than this are left out (the worker stopped writing: it is gone or stuck).
MAX_AGE_S = 5.0
#: The last attempts a worker keeps (and the page shows) across the server.
LAST_ATTEMPTS = 50
#: A snapshot larger than this is not read.
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024
#: How long stopping the publisher may take.
CLOSE_TIMEOUT_S = 2.0
#: Restarts of dead workers allowed within :data:`RESTART_WINDOW_S`; one more stops the server (a crash loop).
MAX_RESTARTS = 10
#: The window :data:`MAX_RESTARTS` counts in.
RESTART_WINDOW_S = 60.0
_SUFFIX = ".json"
_RESTARTS = "restarts"  # no .json suffix: never read as a worker's totals
_OUTCOMES = frozenset(get_args(Outcome))

Labels = tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """One worker's share, as ``/status`` lists it.

    Attributes:
        name: The worker's name (its process id).
        age: Seconds since its totals were taken (0 for the worker answering).
        in_flight: Its requests in flight.
        requests: The requests it finished.
    """

    name: str
    age: float
    in_flight: int
    requests: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """What a worker (or, merged, the whole server) counted and knows, at one time.

    Attributes:
        worker: The worker's name.
        at: When the totals were taken (wall-clock seconds).
        in_flight: Requests being served.
        requests: Requests finished.
        counters: Per counter name, the total per label tuple.
        histograms: Per histogram name, per label tuple: the count per bucket (+Inf last), then the sum.
        recent: Attempt counts per minute bucket, per (profile, outcome).
        last: The last attempts, oldest first (at most :data:`LAST_ATTEMPTS`).
        cooldowns: Active cooldowns: key → deadline.
        keys: Records of rejected credentials, by key id.
        breakers: Open breakers: entry key → record.
        transitions: Breaker transitions per (entry key, transition).
        headroom: The headroom rows of :meth:`turnout.client.Client.status` (relative to :attr:`at`).
        pools: Each pool member's load, ``(pool, load)`` (:func:`turnout.walk.pools.pool_loads`).
        hedging: What hedging did (None: no profile hedges).
        workers: The workers merged into these totals (set by :func:`merge`).
        restarts: Dead workers the parent process started again (read from the server's directory).
    """

    worker: str
    at: float
    in_flight: int = 0
    requests: int = 0
    counters: Mapping[str, Mapping[Labels, float]] = field(default_factory=dict)
    histograms: Mapping[str, Mapping[Labels, Sequence[float]]] = field(default_factory=dict)
    recent: Mapping[int, Mapping[tuple[str, str], int]] = field(default_factory=dict)
    last: tuple[Attempt, ...] = ()
    cooldowns: Mapping[str, float] = field(default_factory=dict)
    keys: Mapping[str, KeyHealth] = field(default_factory=dict)
    breakers: Mapping[str, BreakerRecord] = field(default_factory=dict)
    transitions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    headroom: tuple[Mapping[str, Any], ...] = ()
    pools: tuple[tuple[str, MemberLoad], ...] = ()
    hedging: HedgeTally | None = None
    workers: tuple[Worker, ...] = ()
    restarts: int = 0


def merge(own: Totals, peers: Sequence[Totals], now: float) -> Totals:
    """``own`` (the answering worker's live totals) with the other workers' (see the module docstring).

    Without peers, ``own`` is returned as it is, with itself as the only worker.
    """
    workers = tuple(
        Worker(name=t.worker, age=round(max(0.0, now - t.at), 3), in_flight=t.in_flight, requests=t.requests)
        for t in (own, *peers)
    )
    if not peers:
        return replace(own, workers=workers)
    every = (own, *peers)
    return replace(
        own,
        in_flight=sum(t.in_flight for t in every),
        requests=sum(t.requests for t in every),
        counters=_sum_families([t.counters for t in every], _add_number),
        histograms=_sum_families([t.histograms for t in every], _add_rows),
        recent=_sum_families([t.recent for t in every], _add_number),
        last=tuple(sorted((a for t in every for a in t.last), key=lambda a: a.started_at)[-LAST_ATTEMPTS:]),
        cooldowns=_latest_deadlines(every, now),
        keys=_strongest(every),
        breakers=_latest_breakers(every),
        transitions=dict(sum((Counter(t.transitions) for t in every), Counter())),
        headroom=_newest_headroom(every, now),
        pools=tuple(merge_loads(row for t in every for row in t.pools)),
        hedging=_sum_tallies(t.hedging for t in every),
        workers=workers,
    )


def _sum_tallies(tallies: Iterable[HedgeTally | None]) -> HedgeTally | None:
    seen = [t for t in tallies if t is not None]
    return sum(seen[1:], seen[0]) if seen else None


def _add_number(a: Any, b: Any) -> Any:
    return a + b


def _add_rows(a: Sequence[float], b: Sequence[float]) -> list[float]:
    if len(a) != len(b):  # another version's buckets: keep the first
        return list(a)
    return [x + y for x, y in zip(a, b, strict=True)]


def _sum_families(families: Iterable[Mapping[Any, Mapping[Any, Any]]], add: Callable[[Any, Any], Any]) -> Any:
    out: dict[Any, dict[Any, Any]] = {}
    for family in families:
        for name, rows in family.items():
            into = out.setdefault(name, {})
            for key, value in rows.items():
                into[key] = add(into[key], value) if key in into else value
    return out


def _latest_deadlines(every: Iterable[Totals], now: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for t in every:
        for key, until in t.cooldowns.items():
            if until > now and until > out.get(key, float("-inf")):
                out[key] = until
    return dict(sorted(out.items()))


def _strongest(every: Iterable[Totals]) -> dict[str, KeyHealth]:
    out: dict[str, KeyHealth] = {}
    for t in every:
        for kid, record in t.keys.items():
            out[kid] = stronger(out.get(kid), record)
    return out


def _latest_breakers(every: Iterable[Totals]) -> dict[str, BreakerRecord]:
    out: dict[str, BreakerRecord] = {}
    for t in every:
        for key, record in t.breakers.items():
            known = out.get(key)
            if known is None or (record.opened_at, record.until) > (known.opened_at, known.until):
                out[key] = record
    return out


def _newest_headroom(every: Iterable[Totals], now: float) -> tuple[Mapping[str, Any], ...]:
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for t in every:
        for row in t.headroom:
            aged = _aged(row, now - t.at)
            key = (str(row.get("profile")), str(row.get("key_id")))
            known = newest.get(key)
            if known is None or float(aged.get("age") or 0.0) < float(known.get("age") or 0.0):
                newest[key] = aged
    return tuple(newest[k] for k in sorted(newest))


def _aged(row: Mapping[str, Any], seconds: float) -> Mapping[str, Any]:
    """A headroom row read ``seconds`` ago, as it reads now (older, and nearer to its refills)."""
    if seconds <= 0:
        return row
    out = dict(row)
    if isinstance(out.get("age"), int | float):
        out["age"] = round(out["age"] + seconds, 3)
    for name in ("requests_reset_in", "tokens_reset_in"):
        if isinstance(out.get(name), int | float):
            out[name] = round(max(0.0, out[name] - seconds), 3)
    return out


# --- the snapshot files ---------------------------------------------------------------------------------


def encode(t: Totals) -> bytes:
    """``t`` as a snapshot file's bytes."""
    return orjson.dumps(
        {
            "worker": t.worker,
            "at": t.at,
            "in_flight": t.in_flight,
            "requests": t.requests,
            "counters": {name: [[list(k), v] for k, v in rows.items()] for name, rows in t.counters.items()},
            "histograms": {name: [[list(k), list(v)] for k, v in rows.items()] for name, rows in t.histograms.items()},
            "recent": [[b, p, o, n] for b, counts in t.recent.items() for (p, o), n in counts.items()],
            "last": [[a.started_at, a.provider, a.model, a.outcome, a.status, a.duration_ms] for a in t.last],
            "cooldowns": dict(t.cooldowns),
            "keys": [h.encode().decode() for h in t.keys.values()],
            "breakers": {k: r.encode() for k, r in t.breakers.items()},
            "transitions": [[k, tr, n] for (k, tr), n in t.transitions.items()],
            "headroom": list(t.headroom),
            "pools": [[p, x.member, x.in_flight, x.calls, x.share, x.ttft_ms] for p, x in t.pools],
            "hedging": _tally_row(t.hedging),
        }
    )


def decode(raw: bytes) -> Totals | None:
    """The totals of a snapshot file (None for anything malformed: a file is never trusted to be whole)."""
    try:
        d = orjson.loads(raw)
        recent: dict[int, dict[tuple[str, str], int]] = {}
        for b, p, o, n in d["recent"]:
            recent.setdefault(int(b), {})[(str(p), str(o))] = int(n)
        keys = [decode_key(text) for text in d["keys"]]
        breakers = {str(k): BreakerRecord.decode(v) for k, v in d["breakers"].items()}
        return Totals(
            worker=str(d["worker"]),
            at=float(d["at"]),
            in_flight=int(d["in_flight"]),
            requests=int(d["requests"]),
            counters={
                str(name): {tuple(map(str, k)): float(v) for k, v in rows} for name, rows in d["counters"].items()
            },
            histograms={
                str(name): {tuple(map(str, k)): [float(x) for x in v] for k, v in rows}
                for name, rows in d["histograms"].items()
            },
            recent=recent,
            last=tuple(_attempt(row) for row in d["last"][-LAST_ATTEMPTS:]),
            cooldowns={str(k): float(v) for k, v in d["cooldowns"].items()},
            keys={h.key_id: h for h in keys if h is not None},
            breakers={k: r for k, r in breakers.items() if r is not None},
            transitions={(str(k), str(tr)): int(n) for k, tr, n in d["transitions"]},
            headroom=tuple(row for row in d["headroom"] if isinstance(row, dict)),
            pools=tuple(_load(row) for row in d.get("pools", ())),
            hedging=_tally(d.get("hedging")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _load(row: Sequence[Any]) -> tuple[str, MemberLoad]:
    pool, member, in_flight, calls, share, ttft_ms = row
    return str(pool), MemberLoad(
        member=str(member),
        in_flight=int(in_flight),
        calls=int(calls),
        share=float(share) if share is not None else None,
        ttft_ms=float(ttft_ms) if ttft_ms is not None else None,
    )


def _tally_row(t: HedgeTally | None) -> list[float] | None:
    return None if t is None else [t.calls, t.hedged, t.hedge_wins, t.original_wins, t.budget]


def _tally(row: Sequence[Any] | None) -> HedgeTally | None:
    if row is None:
        return None
    calls, hedged, hedge_wins, original_wins, budget = row
    return HedgeTally(
        calls=int(calls),
        hedged=int(hedged),
        hedge_wins=int(hedge_wins),
        original_wins=int(original_wins),
        budget=float(budget),
    )


def _attempt(row: Sequence[Any]) -> Attempt:
    started, provider, model, outcome, status, duration = row
    if outcome not in _OUTCOMES:
        raise ValueError("unknown outcome")
    return Attempt(
        provider=str(provider),
        model=str(model),
        outcome=outcome,
        status=None if status is None else int(status),
        started_at=float(started),
        duration_ms=float(duration),
    )


class Peers:
    """The directory where the workers of one server publish their totals, seen from one worker.

    Args:
        directory: The server's directory (created by the parent process, readable by its user only).
        worker: This worker's name (default: its process id); its file is ``<worker>.json``.
        clock: Wall-clock seconds (the age of a snapshot; the same clock the totals are taken with).
        interval: Seconds between two publications.
        max_age: Snapshots older than this are left out.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        worker: str | None = None,
        clock: Callable[[], float] = time.time,
        interval: float = INTERVAL_S,
        max_age: float = MAX_AGE_S,
    ) -> None:
        self.directory = Path(directory)
        self.worker = worker if worker is not None else str(os.getpid())
        self.path = self.directory / f"{self.worker}{_SUFFIX}"
        self.clock = clock
        self.interval = interval
        self.max_age = max_age
        self._task: asyncio.Task[None] | None = None
        #: Worker restarts the parent last published (updated by :meth:`peers`).
        self.restarts = 0
        self._failing = False
        self._writing = asyncio.Lock()  # one write at a time, in the order the totals were taken

    def start(self, totals: Callable[[], Totals]) -> None:
        """Publish ``totals()`` now and then every :attr:`interval` seconds, until :meth:`aclose`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(totals), name="turnout-peers")

    async def _run(self, totals: Callable[[], Totals]) -> None:
        while True:
            await self.publish(totals())
            await asyncio.sleep(self.interval)

    async def publish(self, totals: Totals) -> None:
        """Write this worker's file (in a thread; an error is logged once and the next publication tries again)."""
        data = encode(totals)
        try:
            async with self._writing:
                await asyncio.to_thread(self._write, data)
        except OSError as exc:
            if not self._failing:
                log.warning("turnout gateway: cannot publish this worker's totals: %s", exc.strerror or exc)
            self._failing = True
        else:
            self._failing = False

    def _write(self, data: bytes) -> None:
        tmp = self.directory / f".{self.worker}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.path)  # readers see the old file or the new one, never half of one

    def peers(self) -> list[Totals]:
        """The other workers' totals published in the last :attr:`max_age` seconds (blocking: file reads)."""
        now = self.clock()
        out = []
        self.restarts = read_restarts(self.directory)
        try:
            paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
        except OSError:
            return []
        for path in paths:
            if path == self.path:
                continue
            try:
                with path.open("rb") as f:
                    raw = f.read(MAX_SNAPSHOT_BYTES + 1)
            except OSError:  # the worker removed it meanwhile
                continue
            totals = decode(raw) if len(raw) <= MAX_SNAPSHOT_BYTES else None
            if totals is not None and now - totals.at <= self.max_age:
                out.append(totals)
        return out

    async def read_peers(self) -> list[Totals]:
        """:meth:`peers`, in a thread."""
        return await asyncio.to_thread(self.peers)

    async def aclose(self) -> None:
        """Stop publishing and remove this worker's file (bounded by :data:`CLOSE_TIMEOUT_S`)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait((task,), timeout=CLOSE_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


class RestartBudget:
    """How often the parent restarts dead workers: at most ``limit`` restarts in any ``window`` seconds.

    Args:
        limit: Restarts allowed within the window.
        window: The window, in seconds.
        clock: Monotonic seconds.
    """

    def __init__(
        self, limit: int = MAX_RESTARTS, window: float = RESTART_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self.clock = clock
        self.total = 0
        self._recent: list[float] = []

    def allow(self) -> bool:
        """Take one restart now: True when the budget has room (and it is counted), False for a crash loop."""
        now = self.clock()
        self._recent = [t for t in self._recent if now - t < self.window]
        if len(self._recent) >= self.limit:
            return False
        self._recent.append(now)
        self.total += 1
        return True


def publish_restarts(directory: str | Path, restarts: int) -> None:
    """Write the number of worker restarts to the server's directory (atomically; an error is logged)."""
    folder = Path(directory)
    tmp = folder / f".{_RESTARTS}.tmp"
    try:
        tmp.write_text(str(restarts))
        os.replace(tmp, folder / _RESTARTS)
    except OSError as exc:
        log.warning("turnout gateway: cannot record the worker restarts: %s", exc.strerror or exc)


def read_restarts(directory: str | Path) -> int:
    """The number of worker restarts the parent published (0 when none was, or it cannot be read)."""
    try:
        with (Path(directory) / _RESTARTS).open("rb") as f:
            raw = f.read(32)
    except OSError:
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        return 0
