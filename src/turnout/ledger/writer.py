"""The attempt ledger: every attempt of every call, persisted to SQLite (its summaries: :mod:`turnout.ledger.summary`).

Writes never block the event loop: records go onto a queue that a background thread drains into SQLite
in batches. The ledger holds no prompt, response or provider error text, and no keys (keys appear only
as key ids).

A process killed (``kill -9``) loses the records still queued. A limited key's call reserved its worst case in
the file before it was sent, and that row stays until the file holds the call's record: the next ledger to open
the file (or to reserve) bills it at that worst case (:mod:`turnout.ledger.reservations`). A call without a
reservation (an unlimited key's) is lost with the last batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from turnout.core.attribution import total_cost
from turnout.core.errors import ConfigError
from turnout.ledger.reservations import RENEW_S, Connections, admit, recover, renew
from turnout.ledger.reservations import RESERVATION_TTL_S as RESERVATION_TTL_S
from turnout.ledger.rows import MAX_TEXT, SCHEMA, CallRecord, migrate, write_rows, write_sanitised
from turnout.ledger.summary import DaySummary as DaySummary
from turnout.ledger.summary import LedgerSummary as LedgerSummary
from turnout.ledger.summary import ProfileDay as ProfileDay
from turnout.ledger.summary import RouteSummary as RouteSummary
from turnout.ledger.summary import day_summary as day_summary
from turnout.ledger.summary import now as now
from turnout.ledger.summary import spend_by_caller as spend_by_caller
from turnout.ledger.summary import summarize as summarize

log = logging.getLogger("turnout.ledger")

_STOP = object()

#: How long :meth:`Ledger.flush` and :meth:`Ledger.aclose` wait for the writer at most (seconds).
FLUSH_TIMEOUT_S = 10.0
#: How often the writer tries again to write what it could not (seconds).
RETRY_S = 1.0
#: The most calls kept in memory for a later write while the file refuses them (beyond: dropped and counted).
MAX_PENDING = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerHealth:
    """Whether the ledger can write now, and what went wrong (``/status``, the status page).

    Attributes:
        ok: The last write succeeded (or nothing was written yet).
        problem: What the last failure was (an exception's kind and SQLite's message; never a value), or None.
        errors: Failed writes so far: each batch or row SQLite refused, each failed open, each call dropped.
        sanitised: Calls written in a sanitised form (a value SQLite could not store was replaced).
        pending: Calls waiting to be written again.
        since: When the current state began (Unix seconds).
    """

    ok: bool
    problem: str | None
    errors: int
    sanitised: int
    pending: int
    since: float


class CallListener(Protocol):
    """What is told of each call the ledger is given, as it is given (the gateway's spend book).

    A call's record is its one final figure: whoever settles money for a call (a spend reservation) takes it from
    here, so the ledger's row and the settle never disagree.
    """

    def opened(self, call_id: str) -> None:
        """Call ``call_id`` began: a record of it will be given (:meth:`recorded`)."""

    def recorded(self, call: CallRecord, cost: float) -> None:
        """``call`` was given to the ledger; ``cost`` is what its attempts cost (the row's ``cost_usd``)."""


class LedgerUnavailable(Exception):
    """The ledger could not answer a question about what it holds (its writer is failing or gone)."""


@dataclass(frozen=True, slots=True)
class _Release:
    """A call ended: drop its reservation once the file holds its record (see :meth:`Ledger.release`)."""

    call_id: str


@dataclass(slots=True)
class _Query:
    """Today's spend per caller, asked of the writer thread (see :meth:`Ledger.spend_since`)."""

    since: float
    done: threading.Event
    totals: dict[str, float] | None = None
    written: dict[str, float] | None = None


class Ledger:
    """Persists :class:`CallRecord` values on a background thread.

    The writer never dies and never blocks shutdown: a batch SQLite refuses for any reason is written again
    row by row, and a row SQLite still refuses is written in a sanitised form (values it cannot store
    replaced) and counted; calls the file cannot take at all (disk full, read-only, a directory in its place)
    are kept (up to :data:`MAX_PENDING`) and written again every :data:`RETRY_S`, and the trouble is logged once
    per change of state. When the file it holds is no longer at the configured path (deleted, moved, rotated),
    the writer opens the path again, and what the file it leaves held for yesterday and today keeps counting
    toward the limits (a rotated ledger does not start a key's day afresh). :meth:`flush` and :meth:`aclose` wait
    at most ``flush_timeout``.

    The ledger also keeps, per caller and UTC day, the cost of the calls it was given and of those it wrote,
    so that a spend limit counts every call until the file holds it (:meth:`given`, :meth:`spend_since`).

    Args:
        path: The SQLite file (created with its directory and tables, when missing, by the constructor).
        batch_delay: Seconds the writer waits after the first record of a batch, so that calls made
            meanwhile are written in the same transaction (fewer commits, less work per call).
        flush_timeout: The longest :meth:`flush` and :meth:`aclose` wait (seconds).
        retry_s: How often calls the file refused are written again (seconds).

    Attributes:
        errors: Failed writes (see :class:`LedgerHealth`).
        sanitised: Calls written in a sanitised form.

    Raises:
        ConfigError: ``path`` cannot hold the database (``ledger.path``).
    """

    #: Told of every call opened and recorded (see :class:`CallListener`; None: nobody listens).
    listener: CallListener | None = None

    def __init__(
        self,
        path: str | Path,
        *,
        batch_delay: float = 0.05,
        flush_timeout: float = FLUSH_TIMEOUT_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self.path = Path(path)
        self.batch_delay = batch_delay
        self.flush_timeout = flush_timeout
        self.retry_s = retry_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors = 0
        self.sanitised = 0
        self._pending: list[CallRecord] = []  # refused by the file; written again (writer thread only)
        self._releases: list[str] = []  # reservations to drop once the calls before them are written (writer only)
        self._reserving = Connections(self.path, lambda: self._open(autocommit=True))  # closed by aclose
        self._released: dict[str, None] = {}  # released reservations not yet dropped from the file (under _lock)
        self._problem: str | None = None
        self._since = time.time()
        # cost per (caller, UTC day number): given to the ledger, and written to the file (under _lock)
        self._given: dict[tuple[str, int], float] = {}
        self._written: dict[tuple[str, int], float] = {}
        # per file left behind (moved, deleted): what it held per (caller, UTC day) when the writer left it
        self._carried: list[dict[tuple[str, int], float]] = []
        self._holding: dict[str, None] = {}  # reservations this ledger made and has not dropped (under _lock)
        self._renewed = -math.inf  # when the writer last renewed their leases (monotonic; writer thread only)
        try:  # a path that cannot hold the database fails here, not silently in the writer thread
            db = self._open(autocommit=True)[0]
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"cannot open the ledger file {self.path}: {exc}", path="ledger.path", code="ledger_unavailable"
            ) from exc
        try:  # calls a process that ended left reserved are billed before anything reads the day's spend
            recover(db, time.time())
        except (OSError, sqlite3.Error) as exc:  # tried again by every reservation
            self.errors += 1
            log.error("turnout ledger: cannot bill what ended processes left reserved in %s (%s)", self.path, exc)
        finally:
            db.close()

    def _open(self, *, autocommit: bool = False) -> tuple[sqlite3.Connection, tuple[int, int]]:
        """The database, with its directory and tables created when missing, and the file's identity.

        ``autocommit``: a reserving thread's connection (explicit transactions; closed by :meth:`aclose`).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # other processes (gateway workers) may share the file
        db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=not autocommit)
        try:
            db.executescript(SCHEMA)
            migrate(db)
            db.execute("PRAGMA journal_mode=WAL")
            # WAL with synchronous=NORMAL: no fsync per commit; a power cut may lose the last batches,
            # never corrupt the file. The ledger is accounting, not a transaction log.
            db.execute("PRAGMA synchronous=NORMAL")
            st = os.stat(self.path)
        except (OSError, sqlite3.Error):
            db.close()
            raise
        if autocommit:
            db.isolation_level = None
        return db, (st.st_dev, st.st_ino)

    @property
    def health(self) -> LedgerHealth:
        """The writer's state now."""
        problem = self._problem
        return LedgerHealth(
            ok=problem is None,
            problem=problem,
            errors=self.errors,
            sanitised=self.sanitised,
            pending=len(self._pending),
            since=self._since,
        )

    def _ensure_thread(self) -> None:
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._lock:
                thread = self._thread
                if thread is None or not thread.is_alive():  # never started, closed, or (a bug) dead: (re)start
                    self._thread = threading.Thread(target=self._run, name="turnout-ledger", daemon=True)
                    self._thread.start()

    def record(self, call: CallRecord) -> None:
        """Queue a call for writing (returns at once), then tell the :attr:`listener`."""
        cost = total_cost(call.attempts) or 0.0
        if cost and call.caller is not None:
            key = (call.caller, _day_number(call.ts))
            with self._lock:
                self._given[key] = self._given.get(key, 0.0) + cost
        self._ensure_thread()
        self._queue.put(call)
        if self.listener is not None:
            self.listener.recorded(call, cost)

    def given(self, caller: str, since: float) -> float:
        """The cost of the calls of ``caller`` given to this ledger on the UTC day of ``since`` (written or not)."""
        key = (caller, _day_number(since))
        with self._lock:
            return self._given.get(key, 0.0)

    async def spend_since(self, since: float) -> tuple[dict[str, float], dict[str, float]]:
        """Cost per caller in the file since ``since``, and what this ledger had written of it when it read.

        The writer thread answers between two batches, so the two agree: a call given to this ledger is in the
        file exactly when it is counted in the second mapping. What the caller has spent is then the file's
        total, plus what this ledger was given minus what it had written (:meth:`given`).

        Raises:
            LedgerUnavailable: The writer cannot read the file now, or did not answer within ``flush_timeout``.
        """
        self._ensure_thread()
        query = _Query(since=since, done=threading.Event())
        self._queue.put(query)
        answered = await asyncio.to_thread(query.done.wait, self.flush_timeout)
        if not answered or query.totals is None or query.written is None:
            raise LedgerUnavailable(self._problem or "the ledger writer did not answer")
        return query.totals, query.written

    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        identity: tuple[int, int] | None = None
        stop = False
        try:
            while not stop:
                timeout = self.retry_s if self._pending else None
                if self._holding:  # leases to renew while calls hold reservations
                    timeout = RENEW_S if timeout is None else min(timeout, RENEW_S)
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    item = None  # time to write again what the file refused, or to renew leases
                if isinstance(item, CallRecord) and self.batch_delay:
                    time.sleep(self.batch_delay)  # let a busy process's calls gather into one transaction
                batch = [item] if item is not None else []
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(x is _STOP for x in batch)
                try:
                    db, identity = self._batch(db, identity, batch)
                    db, identity = self._renew(db, identity)
                except Exception as exc:  # a bug must not stop the writer: note it, carry on
                    self.errors += 1
                    self._trouble(exc)
                finally:
                    for x in batch:  # whatever happened, nobody waits on the writer for ever
                        if isinstance(x, threading.Event):
                            x.set()
                        elif isinstance(x, _Query):
                            x.done.set()
        finally:
            if db is not None:
                db.close()

    def _batch(
        self, db: sqlite3.Connection | None, identity: tuple[int, int] | None, batch: list[Any]
    ) -> tuple[sqlite3.Connection | None, tuple[int, int] | None]:
        """Write the calls of one batch (and those waiting), then answer its queries."""
        calls = [x for x in batch if isinstance(x, CallRecord)]
        if self._pending:
            calls, self._pending = self._pending + calls, []
        self._releases += [x.call_id for x in batch if isinstance(x, _Release)]
        queries = [x for x in batch if isinstance(x, _Query)]
        if calls or queries or self._releases:
            db, identity = self._connection(db, identity)
        if calls:
            if db is None:
                self._keep(calls)
            else:
                self._write_all(db, calls)
        if self._releases and db is not None and not self._pending:  # a reservation goes once its record is in
            try:
                with db:
                    db.executemany("DELETE FROM reservations WHERE call_id = ?", [(c,) for c in self._releases])
                with self._lock:
                    for c in self._releases:
                        self._released.pop(c, None)
                        self._holding.pop(c, None)
                self._releases = []
            except Exception as exc:
                self.errors += 1
                self._trouble(exc)
        for query in queries:
            self._answer(db, query)
        return db, identity

    # --- reservations shared by the processes writing the file --------------------------------------

    async def reserve(self, call_id: str, caller: str, amount: float, limit: float, since: float) -> bool:
        """Reserve ``amount`` for ``call_id`` in the file while ``caller``'s spend and reservations are under ``limit``.

        Spend counts since ``since`` (the UTC day's start). Returns whether it reserved.

        The check and the insert are one SQLite write transaction, so every process writing the file (the workers
        of a host) shares one limit. The reservation goes when the call's record is written after
        :meth:`release`. One held by a process that ended is billed at its amount first (the process may have died
        before writing the call's record: :mod:`turnout.ledger.reservations`); one older than
        :data:`RESERVATION_TTL_S` expires.

        Raises:
            LedgerUnavailable: The file cannot take the reservation (full, read-only, gone).
        """
        try:
            admitted = await asyncio.to_thread(self._reserve, call_id, caller, amount, limit, since)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerUnavailable(f"{type(exc).__name__}: {str(exc)[:MAX_TEXT]}") from exc
        if admitted:
            self._ensure_thread()  # it renews the reservation's lease while the call runs
        return admitted

    def _reserve(self, call_id: str, caller: str, amount: float, limit: float, since: float) -> bool:
        day = _day_number(since)

        def local() -> tuple[frozenset[str], float]:
            with self._lock:  # this process's ended calls count by their records, written or not, not their rows
                unwritten = self._given.get((caller, day), 0.0) - self._written.get((caller, day), 0.0)
                carried = sum(left.get((caller, day), 0.0) for left in self._carried)
                return frozenset(self._released), max(unwritten, 0.0) + carried

        admitted = admit(self._reserving.get(), (call_id, caller, amount), limit, since, time.time(), local)
        if admitted:
            with self._lock:
                self._holding[call_id] = None
        return admitted

    def _renew(
        self, db: sqlite3.Connection | None, identity: tuple[int, int] | None
    ) -> tuple[sqlite3.Connection | None, tuple[int, int] | None]:
        """Renew the leases of this process's reservations, at most every :data:`RENEW_S` (writer thread)."""
        now = time.monotonic()
        if not self._holding or now - self._renewed < RENEW_S:
            return db, identity
        db, identity = self._connection(db, identity)
        if db is not None:
            try:
                renew(db, time.time())
                self._renewed = now
            except sqlite3.Error as exc:  # tried again at the next tick; a lease lasts four of them
                self.errors += 1
                log.warning("turnout ledger: cannot renew the leases of reservations in %s (%s)", self.path, exc)
        return db, identity

    def release(self, call_id: str) -> None:
        """The call ``call_id`` ended (its record, if any, is already queued): drop its reservation after it."""
        with self._lock:
            self._released[call_id] = None
        self._ensure_thread()
        self._queue.put(_Release(call_id))

    def _connection(
        self, db: sqlite3.Connection | None, identity: tuple[int, int] | None
    ) -> tuple[sqlite3.Connection | None, tuple[int, int] | None]:
        """The open database, opened again when the configured path no longer names the file it holds."""
        if db is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == identity:
                    return db, identity
            except OSError:
                pass
            self._carry(db)
            db.close()
            log.warning(
                "turnout ledger: %s is no longer the file being written (moved or deleted); reopening", self.path
            )
        try:
            return self._open()
        except Exception as exc:  # any failure to open: counted, logged once, tried again later
            self.errors += 1
            self._trouble(exc)
            return None, None

    def _carry(self, db: sqlite3.Connection) -> None:
        """Keep what the file being left holds for yesterday and today: a day's limits still count it.

        (A file moved back to the path later counts twice for its day: a limit errs on the side of refusing.)
        """
        since = (_day_number(time.time()) - 1) * 86400.0
        try:
            rows = db.execute(
                "SELECT caller, CAST(ts / 86400 AS INTEGER), SUM(cost_usd) FROM calls "
                "WHERE caller IS NOT NULL AND ts >= ? GROUP BY 1, 2",
                (since,),
            ).fetchall()
        except sqlite3.Error as exc:  # unreadable: its spend is lost to the limits, loudly
            self.errors += 1
            self._trouble(exc)
            return
        with self._lock:
            self._carried.append({(caller, int(day)): cost or 0.0 for caller, day, cost in rows})

    def _write_all(self, db: sqlite3.Connection, calls: list[CallRecord]) -> None:
        """Write ``calls``: in one transaction, else row by row, sanitising a row SQLite refuses."""
        try:
            write_rows(db, calls)
        except Exception as exc:
            self.errors += 1
            if _file_trouble(exc):  # the file takes nothing now: keep the calls for later
                self._trouble(exc)
                self._keep(calls)
                return
            self._row_by_row(db, calls)
        else:
            self._wrote(calls)
            self._trouble(None)

    def _row_by_row(self, db: sqlite3.Connection, calls: list[CallRecord]) -> None:
        for n, c in enumerate(calls):
            try:
                write_rows(db, [c])
                self._wrote([c])
                continue
            except Exception as exc:
                if _file_trouble(exc):
                    self.errors += 1
                    self._trouble(exc)
                    self._keep(calls[n:])
                    return
            try:
                kept_cost = write_sanitised(db, c)
            except Exception as exc:  # not even the sanitised row: the call is lost, loudly
                self.errors += 1
                self._trouble(exc)
                log.error("turnout ledger: a call could not be written even sanitised; it is dropped")
            else:
                self.sanitised += 1
                if kept_cost:  # else its cost stays counted as unwritten: a limit still sees it
                    self._wrote([c])
                log.warning("turnout ledger: a call held values SQLite cannot store; written sanitised")
        self._trouble(None)

    def _keep(self, calls: list[CallRecord]) -> None:
        """Keep calls the file refused for the next try (the oldest dropped beyond :data:`MAX_PENDING`)."""
        self._pending = calls
        if len(calls) > MAX_PENDING:
            dropped = len(calls) - MAX_PENDING
            self.errors += dropped
            self._pending = calls[dropped:]
            log.error("turnout ledger: %d calls dropped (more than %d waiting to be written)", dropped, MAX_PENDING)

    def _wrote(self, calls: Sequence[CallRecord]) -> None:
        with self._lock:
            for c in calls:
                if c.caller is not None:
                    cost = total_cost(c.attempts)
                    if cost:
                        key = (c.caller, _day_number(c.ts))
                        self._written[key] = self._written.get(key, 0.0) + cost

    def _trouble(self, exc: BaseException | None) -> None:
        """Note the writer's state; log once when it changes (never a value of a record)."""
        problem = None if exc is None else f"{type(exc).__name__}: {str(exc)[:MAX_TEXT]}"
        was = self._problem
        if (problem is None) == (was is None):
            if problem is not None:
                self._problem = problem
            return
        self._problem, self._since = problem, time.time()
        if problem is not None:
            log.error(
                "turnout ledger: cannot write %s (%s); calls are kept in memory and written again every %.0f s",
                self.path,
                problem,
                self.retry_s,
            )
        else:
            log.warning("turnout ledger: writing %s again", self.path)

    def _answer(self, db: sqlite3.Connection | None, query: _Query) -> None:
        """Answer a spend query with the file's totals and what this ledger had written (None: unreadable)."""
        if db is None:
            return
        try:
            totals = _spend_rows(db, query.since)
        except Exception as exc:
            self._trouble(exc)
            return
        day = _day_number(query.since)
        written: dict[str, float] = {}
        with self._lock:
            for (caller, d), cost in self._written.items():
                if d >= day:
                    written[caller] = written.get(caller, 0.0) + cost
            for left in self._carried:  # files left behind still count for their day
                for (caller, d), cost in left.items():
                    if d >= day:
                        totals[caller] = totals.get(caller, 0.0) + cost
        query.totals, query.written = totals, written

    async def flush(self) -> bool:
        """Wait until everything queued so far is written, at most ``flush_timeout``; whether it was.

        A call the file refused is not written: it waits for the writer's next try (see :attr:`health`).
        """
        thread = self._thread
        if thread is None or not thread.is_alive():
            return thread is None
        done = threading.Event()
        self._queue.put(done)
        return await asyncio.to_thread(done.wait, self.flush_timeout) and not self._pending

    async def aclose(self) -> None:
        """Write what is queued and stop the writer thread (waiting at most ``flush_timeout``)."""
        self._reserving.close()
        thread = self._thread
        if thread is None:
            return
        if thread.is_alive():
            self._queue.put(_STOP)
            await asyncio.to_thread(thread.join, self.flush_timeout)
            if thread.is_alive():
                log.error("turnout ledger: the writer did not stop within %.0f s; leaving it", self.flush_timeout)
        if self._pending:
            log.error(
                "turnout ledger: %d calls could not be written to %s before closing", len(self._pending), self.path
            )
        self._thread = None


def _day_number(ts: float) -> int:
    """The UTC day ``ts`` falls in, as a number (days since 1970-01-01)."""
    return int(ts // 86400.0)


def _file_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` says the file takes nothing now (full, read-only, I/O), rather than that a row is bad."""
    # IntegrityError, DataError and InterfaceError are DatabaseErrors about one row's values
    row_errors = sqlite3.IntegrityError | sqlite3.DataError | sqlite3.InterfaceError
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, row_errors)


def _spend_rows(db: sqlite3.Connection, since: float) -> dict[str, float]:
    rows = db.execute(
        "SELECT caller, SUM(cost_usd) FROM calls WHERE caller IS NOT NULL AND ts >= ? GROUP BY caller", (since,)
    ).fetchall()
    return {caller: cost or 0.0 for caller, cost in rows}
