"""What a call's record is, and how it becomes rows of the ledger file: the schema, its migrations, sanitised rows."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turnout.core.attribution import Attempt, RouteRef, total_cost
from turnout.core.types import Usage

#: The largest integer SQLite stores (a signed 64-bit integer).
_SQLITE_MAX = 2**63 - 1
#: The longest text a sanitised row keeps in a column.
MAX_TEXT = 256

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
    accepted INTEGER NOT NULL,
    usage_note TEXT
);
CREATE TABLE IF NOT EXISTS reservations (
    call_id TEXT PRIMARY KEY,
    caller TEXT NOT NULL,
    amount REAL NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL,
    owner TEXT,
    ts REAL,
    lease REAL
);
CREATE INDEX IF NOT EXISTS attempts_ts ON attempts (ts);
CREATE INDEX IF NOT EXISTS calls_ts ON calls (ts);
"""
#: Columns added after the first release, created in an older ledger file when it is opened.
_ADDED_COLUMNS = (
    ("calls", "caller", "TEXT"),
    ("attempts", "usage_note", "TEXT"),
    ("calls", "operation", "TEXT"),
    ("reservations", "owner", "TEXT"),
    ("reservations", "ts", "REAL"),
    ("reservations", "lease", "REAL"),
)
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


def migrate(db: sqlite3.Connection) -> None:
    """Add the columns a ledger file written by an older version lacks."""
    for table, column, kind in _ADDED_COLUMNS:
        if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    db.executescript(_ADDED_INDEXES)


def _rows(calls: Sequence[CallRecord]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The ``calls`` and ``attempts`` rows of ``calls``."""
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
                    usage_note(u),
                )
            )
    return call_rows, attempt_rows


def usage_note(usage: Usage | None) -> str | None:
    """What the ledger notes about a usage: ``estimated`` (Turnout's estimate), ``clamped`` (bounded), or None."""
    if usage is None:
        return None
    if usage.estimated:
        return "estimated"
    return "clamped" if usage.clamped else None


#: Columns that may not be NULL, by position, in a ``calls`` row and an ``attempts`` row.
_CALL_REQUIRED = frozenset((0, 1, 2, 3, 8, 9, 10))
_ATTEMPT_REQUIRED = frozenset((0, 1, 2, 3, 4, 5, 18, 20))


def _clean(value: Any, required: bool) -> Any:
    """A value SQLite stores: integers within 64 bits, finite floats, bounded text; else NULL (or a placeholder)."""
    if value is None or value.__class__ is bool:
        out: Any = None if value is None else int(value)
    elif isinstance(value, int):
        out = int(value) if -_SQLITE_MAX <= value <= _SQLITE_MAX else None
    elif isinstance(value, float):
        out = value if math.isfinite(value) else None
    elif isinstance(value, str):
        out = value[:MAX_TEXT].encode("utf-8", "replace").decode("utf-8")
    else:
        out = None
    if out is None and required:
        return "invalid" if not isinstance(value, int | float) or isinstance(value, bool) else 0
    return out


def _insert(db: sqlite3.Connection, call_rows: list[tuple[Any, ...]], attempt_rows: list[tuple[Any, ...]]) -> None:
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
            "entry, try_number, stream, detail, accepted, usage_note) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            attempt_rows,
        )


def write_rows(db: sqlite3.Connection, calls: Sequence[CallRecord]) -> None:
    """Insert ``calls`` and their attempts (the caller commits)."""
    if calls:
        _insert(db, *_rows(calls))


def write_sanitised(db: sqlite3.Connection, call: CallRecord) -> bool:
    """Write ``call`` with every value SQLite cannot store replaced; whether its cost was kept as it was."""
    (call_row,), attempt_rows = _rows([call])
    clean_call = tuple(_clean(v, n in _CALL_REQUIRED) for n, v in enumerate(call_row))
    clean_attempts = [tuple(_clean(v, n in _ATTEMPT_REQUIRED) for n, v in enumerate(r)) for r in attempt_rows]
    clean_attempts = [(*r[:-1], r[-1] or "sanitised") for r in clean_attempts]
    _insert(db, [clean_call], clean_attempts)
    return bool(clean_call[11] == call_row[11])
