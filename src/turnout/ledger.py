"""The attempt ledger: every attempt of every call, persisted to SQLite, and its summaries.

Writes never block the event loop: records go onto a queue that a background thread drains into SQLite
in batches. The ledger holds no prompt, response or provider error text, and no keys (keys appear only
as key ids).
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnout.attribution import SKIPS, Attempt, RouteRef, total_cost
from turnout.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    ts REAL NOT NULL,
    surface TEXT NOT NULL,
    stream INTEGER NOT NULL,
    requested_provider TEXT,
    requested_model TEXT,
    served_provider TEXT,
    served_model TEXT,
    fallback INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    cost_usd REAL,
    caller TEXT,
    operation TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    call_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    status INTEGER,
    key_id TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cached_input_tokens INTEGER,
    cache_write_tokens INTEGER,
    cost_usd REAL,
    duration_ms REAL,
    ttft_ms REAL,
    retry_after REAL,
    entry INTEGER,
    try_number INTEGER,
    stream INTEGER NOT NULL,
    detail TEXT,
    accepted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_ts ON attempts (ts);
CREATE INDEX IF NOT EXISTS calls_ts ON calls (ts);
"""
#: Columns added after the first release, created in an older ledger file when it is opened.
_ADDED_COLUMNS = (("calls", "caller", "TEXT"), ("calls", "operation", "TEXT"))
_ADDED_INDEXES = "CREATE INDEX IF NOT EXISTS calls_caller_ts ON calls (caller, ts);"


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord:
    """One logical call (a chat, a stream, a turn) and its attempts, ready to persist.

    Attributes:
        call_id: A unique id.
        outcome: ``ok``, or the error's kind (``all_failed``, ``refusal``, ``context_window``, ...).
        accepted_index: Index in ``attempts`` of the attempt whose answer was accepted.
        caller: Who made the call, when known (the gateway records its client key's name; never a key).
        operation: ``embed`` for an embedding call; None (an empty column) for a chat, a stream or a turn, which
            ``stream`` tells apart.
    """

    call_id: str
    ts: float
    surface: str
    stream: bool
    requested: RouteRef | None
    served: RouteRef | None
    fallback: bool
    outcome: str
    attempts: tuple[Attempt, ...]
    accepted_index: int | None = None
    caller: str | None = None
    operation: str | None = None


_STOP = object()


class Ledger:
    """Persists :class:`CallRecord` values on a background thread.

    Args:
        path: The SQLite file (created with its directory and tables, when missing, by the constructor).
        batch_delay: Seconds the writer waits after the first record of a batch, so that calls made
            meanwhile are written in the same transaction (fewer commits, less work per call).

    Attributes:
        errors: Failed writes: each batch SQLite refused, and each call dropped because the file could not
            be opened by the writer.

    Raises:
        ConfigError: ``path`` cannot hold the database (``ledger.path``).
    """

    def __init__(self, path: str | Path, *, batch_delay: float = 0.05) -> None:
        self.path = Path(path)
        self.batch_delay = batch_delay
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors = 0
        try:  # a path that cannot hold the database fails here, not silently in the writer thread
            self._open().close()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"cannot open the ledger file {self.path}: {exc}", path="ledger.path", code="ledger_unavailable"
            ) from exc

    def _open(self) -> sqlite3.Connection:
        """The database, with its directory and tables created when missing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30.0)  # other processes (gateway workers) may share the file
        try:
            db.executescript(SCHEMA)
            _migrate(db)
            db.execute("PRAGMA journal_mode=WAL")
            # WAL with synchronous=NORMAL: no fsync per commit; a power cut may lose the last batches,
            # never corrupt the file. The ledger is accounting, not a transaction log.
            db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="turnout-ledger", daemon=True)
                    self._thread.start()

    def record(self, call: CallRecord) -> None:
        """Queue a call for writing (returns at once)."""
        self._ensure_thread()
        self._queue.put(call)

    def _run(self) -> None:
        try:
            db = self._open()
        except (OSError, sqlite3.Error):  # the file went away since construction
            self._discard()
            return
        try:
            while True:
                item = self._queue.get()
                if isinstance(item, CallRecord) and self.batch_delay:
                    time.sleep(self.batch_delay)  # let a busy process's calls gather into one transaction
                batch = [item]
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(x is _STOP for x in batch)
                calls = [x for x in batch if isinstance(x, CallRecord)]
                try:
                    _write(db, calls)
                except sqlite3.Error:
                    self.errors += 1
                for x in batch:
                    if isinstance(x, threading.Event):
                        x.set()
                if stop:
                    return
        finally:
            db.close()

    def _discard(self) -> None:
        """Drain the queue without a database: count each call as an error, still answer flush and stop."""
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
            else:
                self.errors += 1

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(done)
        await asyncio.to_thread(done.wait)

    async def aclose(self) -> None:
        """Write what is queued and stop the writer thread."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)
        self._thread = None


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns a ledger file written by an older version lacks."""
    for table, column, kind in _ADDED_COLUMNS:
        if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    db.executescript(_ADDED_INDEXES)


def _write(db: sqlite3.Connection, calls: Sequence[CallRecord]) -> None:
    if not calls:
        return
    call_rows = []
    attempt_rows = []
    for c in calls:
        cost = total_cost(c.attempts)
        call_rows.append(
            (
                c.call_id,
                c.ts,
                c.surface,
                int(c.stream),
                c.requested.provider if c.requested else None,
                c.requested.model if c.requested else None,
                c.served.provider if c.served else None,
                c.served.model if c.served else None,
                int(c.fallback),
                c.outcome,
                len(c.attempts),
                cost,
                c.caller,
                c.operation,
            )
        )
        for seq, a in enumerate(c.attempts):
            u = a.usage
            attempt_rows.append(
                (
                    c.call_id,
                    seq,
                    a.started_at,
                    a.provider,
                    a.model,
                    a.outcome,
                    a.status,
                    a.key_id,
                    u.input_tokens if u else None,
                    u.output_tokens if u else None,
                    u.cached_input_tokens if u else None,
                    u.cache_write_tokens if u else None,
                    a.cost_usd,
                    a.duration_ms,
                    a.ttft_ms,
                    a.retry_after,
                    a.entry,
                    a.try_number,
                    int(a.stream),
                    a.detail,
                    int(seq == c.accepted_index),
                )
            )
    with db:
        db.executemany(
            "INSERT OR REPLACE INTO calls (call_id, ts, surface, stream, requested_provider, requested_model, "
            "served_provider, served_model, fallback, outcome, attempts, cost_usd, caller, operation) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            call_rows,
        )
        db.executemany(
            "INSERT INTO attempts (call_id, seq, ts, provider, model, outcome, status, key_id, input_tokens, "
            "output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, duration_ms, ttft_ms, retry_after, "
            "entry, try_number, stream, detail, accepted) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            attempt_rows,
        )


# --- summaries (``turnout ledger``) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteSummary:
    """Totals for one profile and model."""

    provider: str
    model: str
    attempts: int
    outcomes: dict[str, int]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    avg_duration_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerSummary:
    """What ``turnout ledger`` prints.

    Attributes:
        calls: Calls since the cut-off.
        failed_calls: Calls that ended without an answer.
        fallbacks: Calls served by a fallback.
        attempts: Attempt records, skips included.
        failure_classes: Failed attempts per outcome, most frequent first (skips are not failures of a provider).
        skips: Entries skipped without a call, per outcome (``cooldown_skip``, ``breaker_skip``).
        cost_usd: Total cost, None when no attempt was priced.
        routes: Totals per profile and model.
    """

    calls: int
    failed_calls: int
    fallbacks: int
    attempts: int
    failure_classes: dict[str, int]
    cost_usd: float | None
    routes: list[RouteSummary]
    skips: dict[str, int]


def summarize(path: str | Path, *, since: float | None = None) -> LedgerSummary:
    """Totals per profile and model, failure classes, skips, fallbacks and cost since ``since`` (Unix seconds)."""
    p = Path(path)
    if not p.exists():
        return LedgerSummary(
            calls=0, failed_calls=0, fallbacks=0, attempts=0, failure_classes={}, cost_usd=None, routes=[], skips={}
        )
    db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True)  # as_uri escapes '#', '?' and '%'
    try:
        cutoff = since if since is not None else 0.0
        calls, failed, fallbacks = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(outcome != 'ok'), 0), COALESCE(SUM(fallback), 0) FROM calls WHERE ts >= ?",
            (cutoff,),
        ).fetchone()
        classes = dict(
            db.execute(
                "SELECT outcome, COUNT(*) FROM attempts WHERE ts >= ? AND outcome != 'ok' GROUP BY outcome "
                "ORDER BY COUNT(*) DESC",
                (cutoff,),
            ).fetchall()
        )
        rows = db.execute(
            "SELECT provider, model, outcome, COUNT(*), COALESCE(SUM(input_tokens), 0), "
            "COALESCE(SUM(output_tokens), 0), SUM(cost_usd), AVG(duration_ms) FROM attempts WHERE ts >= ? "
            "GROUP BY provider, model, outcome ORDER BY provider, model",
            (cutoff,),
        ).fetchall()
    finally:
        db.close()
    routes: dict[tuple[str, str], dict[str, Any]] = {}
    for provider, model, outcome, n, tin, tout, cost, avg in rows:
        r = routes.setdefault(
            (provider, model),
            {"attempts": 0, "outcomes": {}, "in": 0, "out": 0, "cost": None, "dur": 0.0, "dur_n": 0},
        )
        r["attempts"] += n
        r["outcomes"][outcome] = n
        r["in"] += tin
        r["out"] += tout
        if cost is not None:
            r["cost"] = (r["cost"] or 0.0) + cost
        if avg is not None and outcome not in SKIPS:
            r["dur"] += avg * n
            r["dur_n"] += n
    summaries = [
        RouteSummary(
            provider=prov,
            model=model,
            attempts=r["attempts"],
            outcomes=r["outcomes"],
            input_tokens=r["in"],
            output_tokens=r["out"],
            cost_usd=r["cost"],
            avg_duration_ms=(r["dur"] / r["dur_n"]) if r["dur_n"] else None,
        )
        for (prov, model), r in routes.items()
    ]
    known_costs = [s.cost_usd for s in summaries if s.cost_usd is not None]
    return LedgerSummary(
        calls=calls,
        failed_calls=failed,
        fallbacks=fallbacks,
        attempts=sum(s.attempts for s in summaries),
        failure_classes={k: n for k, n in classes.items() if k not in SKIPS},
        cost_usd=sum(known_costs) if known_costs else None,
        routes=summaries,
        skips={k: n for k, n in classes.items() if k in SKIPS},
    )


def spend_by_caller(path: str | Path, since: float) -> dict[str, float]:
    """Total cost per caller of the calls since ``since`` (Unix seconds); empty when the file does not exist."""
    p = Path(path)
    if not p.exists():
        return {}
    db = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = db.execute(
            "SELECT caller, SUM(cost_usd) FROM calls WHERE caller IS NOT NULL AND ts >= ? GROUP BY caller", (since,)
        ).fetchall()
    except sqlite3.OperationalError:  # no calls table yet, or a file from before callers were recorded
        return {}
    finally:
        db.close()
    return {caller: cost or 0.0 for caller, cost in rows}


def now() -> float:
    """Wall-clock seconds (the ledger's time base)."""
    return time.time()


# --- the day so far (the gateway's status page) ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileDay:
    """One profile's day.

    Attributes:
        profile: ``family.alias``.
        calls: Calls that asked for it first.
        fallbacks: Of those, the calls another entry served.
        attempts: Attempts on it (skips included), whoever asked.
        cost_usd: The cost of its attempts (None when none was priced).
    """

    profile: str
    calls: int
    fallbacks: int
    attempts: int
    cost_usd: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DaySummary:
    """Calls, fallbacks and cost since a time (the start of the UTC day), per profile and per hour.

    Attributes:
        since: The start of the period (Unix seconds).
        profiles: Per profile, most calls first.
        cost_by_hour: The cost of each hour since ``since`` (24 values; 0 for an hour without priced attempts).
    """

    since: float
    profiles: tuple[ProfileDay, ...]
    cost_by_hour: tuple[float, ...]

    @property
    def calls(self) -> int:
        """Every call of the period."""
        return sum(p.calls for p in self.profiles)

    @property
    def fallbacks(self) -> int:
        """Every call of the period that a fallback served."""
        return sum(p.fallbacks for p in self.profiles)

    @property
    def cost_usd(self) -> float | None:
        """The period's cost (None when no attempt was priced)."""
        costs = [p.cost_usd for p in self.profiles if p.cost_usd is not None]
        return sum(costs) if costs else None


#: The most profiles a day summary lists (the configuration names them; a bound all the same).
MAX_DAY_PROFILES = 200


def day_summary(path: str | Path, since: float, *, timeout: float = 5.0) -> DaySummary:
    """Calls, fallbacks and cost per profile, and cost per hour, since ``since`` (blocking: run it in a thread).

    Reads the file read-only; a missing file (or one without tables yet) is an empty day.

    Args:
        path: The ledger file.
        since: The start of the period (Unix seconds), e.g. 00:00 UTC today.
        timeout: How long to wait for a writer's lock.
    """
    empty = DaySummary(since=since, profiles=(), cost_by_hour=(0.0,) * 24)
    p = Path(path)
    if not p.exists():
        return empty
    db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True, timeout=timeout)
    try:
        calls = db.execute(
            "SELECT COALESCE(requested_provider, '-'), COUNT(*), COALESCE(SUM(fallback), 0) FROM calls "
            "WHERE ts >= ? GROUP BY 1 ORDER BY 2 DESC LIMIT ?",
            (since, MAX_DAY_PROFILES),
        ).fetchall()
        attempts = db.execute(
            "SELECT provider, COUNT(*), SUM(cost_usd) FROM attempts WHERE ts >= ? GROUP BY provider LIMIT ?",
            (since, MAX_DAY_PROFILES),
        ).fetchall()
        hours = db.execute(
            "SELECT CAST((ts - ?) / 3600 AS INTEGER), SUM(cost_usd) FROM attempts WHERE ts >= ? GROUP BY 1",
            (since, since),
        ).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return empty
    finally:
        db.close()
    spent = {provider: (n, cost) for provider, n, cost in attempts}
    rows = [
        ProfileDay(
            profile=profile,
            calls=n,
            fallbacks=fallbacks,
            attempts=spent.get(profile, (0, None))[0],
            cost_usd=spent.get(profile, (0, None))[1],
        )
        for profile, n, fallbacks in calls
    ]
    asked = {r.profile for r in rows}
    rows += [  # profiles that only served others' calls
        ProfileDay(profile=provider, calls=0, fallbacks=0, attempts=n, cost_usd=cost)
        for provider, (n, cost) in sorted(spent.items())
        if provider not in asked
    ][: max(0, MAX_DAY_PROFILES - len(rows))]
    by_hour = [0.0] * 24
    for hour, cost in hours:
        if cost is not None and 0 <= hour < 24:
            by_hour[hour] += cost
    return DaySummary(since=since, profiles=tuple(rows), cost_by_hour=tuple(by_hour))
