"""Reservations in the ledger file: who holds one, whether that process still runs, and billing what it left.

A limited key's call reserves its worst case in the ledger file before it is sent
(:meth:`turnout.ledger.writer.Ledger.reserve`); the row goes once the file holds the call's record. A process killed
before its writer wrote its last calls (``kill -9``, the out-of-memory killer, a power cut) leaves their rows
behind. Each row carries what is needed to bill it: the caller, the amount (the call's worst case) and when it was
reserved. Whoever finds a row whose process no longer runs (a ledger opening the file, any process reserving)
turns it into a call billed at that amount, marked :data:`ORPHAN_OUTCOME` with the usage note :data:`ORPHAN_NOTE`,
and drops it, in one write transaction, unless the file already holds the call's record.

Each row names its owner by an identity unique to one start of one process (:func:`process_identity`): the boot
id, the PID namespace, the PID and the process's start time, so that a process that got the PID of a dead one (a
container started again is PID 1 again) is not taken for it. A row of another host, of another PID namespace, or
written where ``/proc`` does not tell start times, is judged by its lease instead: the owner renews the leases of
its rows every :data:`RENEW_S` (:func:`renew`), and a lease not renewed for :data:`LEASE_S` is a dead owner's.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("turnout.ledger")

#: How long a live process's reservation holds at most (seconds): a backstop for a row its process never dropped
#: (a dead process's row is billed, whatever its age).
RESERVATION_TTL_S = 3600.0
#: How long a row's lease lasts unless its owner renews it (seconds).
LEASE_S = 60.0
#: How often a process renews the leases of the rows it holds (seconds).
RENEW_S = 15.0
#: The ``outcome`` (of the call and of its one attempt) of a call billed from a dead process's reservation.
ORPHAN_OUTCOME = "process_died"
#: The attempt's ``usage_note`` of such a call: its cost is the reserved worst case, not a usage.
ORPHAN_NOTE = "reserved"

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Orphan:
    """A reservation billed because its process ended before the file held the call's record.

    Attributes:
        call_id: The call's id.
        caller: The key name it was reserved for.
        amount: What it reserved, and is billed (USD).
        ts: When it was reserved (the call's time in the ledger, so it counts for that UTC day).
    """

    call_id: str
    caller: str
    amount: float
    ts: float


@functools.cache
def _host() -> tuple[str, str] | None:
    """This machine's boot id and this process's PID namespace (None: ``/proc`` does not tell)."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return None
    return (boot, namespace) if boot and "/" not in boot + namespace else None


def _proc_state(pid: int) -> tuple[str, str] | None:
    """Process ``pid``'s state letter and start time (clock ticks after boot), or None when it cannot be read."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the fields after it are plain
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]  # fields 3 and 22 of proc(5)


_identity: tuple[int, str] | None = None  # (pid, identity) of this process; computed again after a fork


def process_identity() -> str:
    """An identity of this process unique to its start: ``boot/pidns/pid/start``, else ``token/<random>``.

    A process that gets a dead one's PID (a container started again) has another identity.
    """
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        host = _host()
        state = _proc_state(pid) if host is not None else None
        if host is not None and state is not None:
            _identity = (pid, f"{host[0]}/{host[1]}/{pid}/{state[1]}")
        else:
            _identity = (pid, f"token/{secrets.token_hex(16)}")
    return _identity[1]


def _pid_alive(pid: int) -> bool:
    """Whether some process ``pid`` runs in this PID namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # it exists, owned by someone else (or an impossible pid)
        return True
    return True


def owner_alive(owner: str | None, pid: int, lease: float | None, now: float) -> bool:
    """Whether the process that wrote a reservation still runs.

    Args:
        owner: The row's identity (:func:`process_identity`; None: written by an older version, which had none).
        pid: The row's process id.
        lease: Until when its owner vouches for it (None: never renewed).
        now: Unix seconds.
    """
    verdict = _judge(owner, pid)
    return verdict if verdict is not None else lease is not None and lease >= now


def _judge(owner: str | None, pid: int) -> bool | None:
    """Whether ``owner`` runs, as this process can see it; None when only its lease can tell."""
    if owner is None:  # only the PID is known: a process reusing it keeps the row (until it expires)
        return _pid_alive(pid)
    if owner == process_identity():
        return True
    parts = owner.split("/")
    host = _host()
    if len(parts) != 4 or host is None or (parts[0], parts[1]) != host:  # another host or PID namespace
        return None
    state = _proc_state(pid)
    if state is not None:
        return state[0] not in "ZXx" and f"{pid}/{state[1]}" == f"{parts[2]}/{parts[3]}"
    return None if _pid_alive(pid) else False  # a process hidden from us (hidepid): its lease tells


def settle_orphans(db: sqlite3.Connection, now: float) -> list[Orphan]:
    """Bill and drop every reservation whose process ended; drop those past their expiry (inside a transaction).

    A dead process's reservation becomes a call (and one attempt) billed at its amount, unless the file already
    holds that call (its record was written, the row not yet dropped). A reservation of a live process past
    :data:`RESERVATION_TTL_S` is dropped unbilled: its process records the call itself.

    Returns:
        The reservations billed.
    """
    rows = db.execute("SELECT call_id, caller, amount, pid, expires, owner, ts, lease FROM reservations").fetchall()
    verdicts: dict[tuple[str | None, int], bool | None] = {}
    dead: list[Orphan] = []
    gone: list[tuple[str]] = []
    for call_id, caller, amount, pid, expires, owner, ts, lease in rows:
        if (owner, pid) not in verdicts:
            verdicts[(owner, pid)] = _judge(owner, pid)
        verdict = verdicts[(owner, pid)]
        if verdict if verdict is not None else lease is not None and lease >= now:
            if expires < now:
                gone.append((call_id,))
            continue
        gone.append((call_id,))
        when = min(ts if ts is not None else expires - RESERVATION_TTL_S, now)
        dead.append(Orphan(call_id=call_id, caller=caller, amount=amount or 0.0, ts=when))
    # a call whose record the file holds is billed by it
    billed = [o for o in dead if db.execute("SELECT 1 FROM calls WHERE call_id = ?", (o.call_id,)).fetchone() is None]
    if billed:
        _bill(db, billed)
    if gone:
        db.executemany("DELETE FROM reservations WHERE call_id = ?", gone)
    return billed


def _bill(db: sqlite3.Connection, orphans: list[Orphan]) -> None:
    """Write each orphan as a call of one attempt, billed at its amount."""
    db.executemany(
        "INSERT INTO calls (call_id, ts, surface, stream, fallback, outcome, attempts, cost_usd, caller) "
        "VALUES (?, ?, 'gateway', 0, 0, ?, 1, ?, ?)",
        [(o.call_id, o.ts, ORPHAN_OUTCOME, o.amount, o.caller) for o in orphans],
    )
    db.executemany(
        "INSERT INTO attempts (call_id, seq, ts, provider, model, outcome, cost_usd, stream, accepted, usage_note) "
        "VALUES (?, 0, ?, '-', '-', ?, ?, 0, 0, ?)",
        [(o.call_id, o.ts, ORPHAN_OUTCOME, o.amount, ORPHAN_NOTE) for o in orphans],
    )


def recover(db: sqlite3.Connection, now: float) -> list[Orphan]:
    """Bill what processes that ended left reserved in the file (one write transaction; ``db`` in autocommit)."""
    if db.execute("SELECT 1 FROM reservations LIMIT 1").fetchone() is None:  # the usual case: take no write lock
        return []
    db.execute("BEGIN IMMEDIATE")
    try:
        billed = settle_orphans(db, now)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    _report(billed)
    return billed


def admit(
    db: sqlite3.Connection,
    reservation: tuple[str, str, float],
    limit: float,
    since: float,
    now: float,
    local: Callable[[], tuple[frozenset[str], float]],
) -> bool:
    """Reserve ``(call_id, caller, amount)`` while the caller's spend since ``since`` and holds are under ``limit``.

    One write transaction (``db`` in autocommit): what dead processes left is billed first, then the check, then
    the row, with this process's identity and a fresh lease.

    Args:
        db: A connection without implicit transactions.
        reservation: The call's id, its caller and the amount to hold (its worst case).
        limit: The caller's daily limit.
        since: The start of the UTC day.
        now: Unix seconds.
        local: What this process knows beyond the file (asked inside the transaction): the calls whose rows it
            will drop (their records count instead) and what the caller spent that the file lacks.
    """
    call_id, caller, amount = reservation
    db.execute("BEGIN IMMEDIATE")
    try:
        billed = settle_orphans(db, now)
        (spent,) = db.execute(
            "SELECT COALESCE(SUM(cost_usd), 0) FROM calls WHERE caller = ? AND ts >= ?", (caller, since)
        ).fetchone()
        rows = db.execute("SELECT call_id, amount FROM reservations WHERE caller = ?", (caller,)).fetchall()
        released, unwritten = local()
        held = sum(held for cid, held in rows if cid not in released)
        admitted = bool(spent + held + unwritten < limit)
        if admitted:
            db.execute(
                "INSERT OR REPLACE INTO reservations (call_id, caller, amount, pid, expires, owner, ts, lease) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (call_id, caller, amount, os.getpid(), now + RESERVATION_TTL_S, process_identity(), now, now + LEASE_S),
            )
        db.execute("COMMIT")  # also when refused: what dead processes left stays billed
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    _report(billed)
    return admitted


class Connections:
    """Each reserving thread's own connection to the ledger file, opened again when the path names another file.

    Args:
        path: The ledger file.
        connect: Opens it (a connection without implicit transactions, usable from another thread to close
            it) and returns it with the file's identity (device, inode).
    """

    def __init__(self, path: Path, connect: Callable[[], tuple[sqlite3.Connection, tuple[int, int]]]) -> None:
        self.path = path
        self._connect = connect
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []

    def get(self) -> sqlite3.Connection:
        """This thread's connection."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._local.identity:
                    return db
            except OSError:
                pass
            with self._lock:
                if db in self._all:
                    self._all.remove(db)
            db.close()
        # closed by close(), from another thread: each is used by its own thread only until then
        db, self._local.identity = self._connect()
        self._local.db = db
        with self._lock:
            self._all.append(db)
        return db

    def close(self) -> None:
        """Close every thread's connection (a thread reserving later opens a new one)."""
        with self._lock:
            connections, self._all = self._all, []
            self._local = threading.local()
        for db in connections:
            db.close()


def renew(db: sqlite3.Connection, now: float) -> None:
    """Extend the leases of this process's reservations to ``now`` + :data:`LEASE_S`."""
    with db:
        db.execute("UPDATE reservations SET lease = ? WHERE owner = ?", (now + LEASE_S, process_identity()))


def _report(billed: list[Orphan]) -> None:
    if billed:
        log.warning(
            "turnout ledger: %d calls of a process that ended before recording them billed at their reserved "
            "worst case ($%.6f)",
            len(billed),
            sum(o.amount for o in billed),
        )
