"""The daily spend book: totals from the ledger, this process's calls on top, a fresh start each UTC day."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from fakes import call_record
from turnout.gateway.spend import SpendBook, day_start, seconds_to_midnight
from turnout.ledger.rows import SCHEMA, CallRecord
from turnout.ledger.writer import Ledger, spend_by_caller

DAY = 86400.0


def record(call_id: str, ts: float, caller: str | None, cost: float) -> CallRecord:
    return call_record(call_id, ts=ts, caller=caller, cost=cost)


def test_day_boundaries_are_utc_midnights() -> None:
    """A day starts at 00:00 UTC and the limit resets at the next one."""
    now = 20000 * DAY + 3600.0
    assert day_start(now) == 20000 * DAY
    assert seconds_to_midnight(now) == DAY - 3600.0


async def test_totals_come_from_the_ledger_per_caller_and_day(tmp_path: Path) -> None:
    """Only today's calls of each caller count; a call given to the ledger counts once, written or not."""
    now = 20000 * DAY + 7200.0
    ledger = Ledger(tmp_path / "l.sqlite3", batch_delay=0)
    ledger.record(record("yesterday", now - DAY, "team", 5.0))
    ledger.record(record("today", now - 60, "team", 1.25))
    ledger.record(record("other", now - 60, "ops", 0.5))
    ledger.record(record("nobody", now - 60, None, 9.0))
    book = SpendBook(ledger, clock=lambda: now)
    await book.refresh()
    assert book.spent("team") == 1.25 and book.spent("ops") == 0.5 and book.spent("new") == 0.0
    ledger.record(record("more", now - 30, "team", 0.25))
    assert book.spent("team") == 1.5  # given to the ledger, not yet in the file read: counted once
    await book.refresh()
    assert book.spent("team") == 1.5  # now in the file: still counted once
    await ledger.aclose()


async def test_a_new_day_starts_from_zero(tmp_path: Path) -> None:
    """When the UTC day changes, yesterday's spend no longer counts."""
    clock = [20000 * DAY + 100.0]
    ledger = Ledger(tmp_path / "l.sqlite3", batch_delay=0)
    ledger.record(record("c", clock[0], "team", 3.0))
    book = SpendBook(ledger, clock=lambda: clock[0])
    await book.refresh()
    assert book.spent("team") == 3.0
    clock[0] += DAY
    assert book.spent("team") == 0.0
    await book.aclose()
    await ledger.aclose()


def test_an_older_ledger_file_gains_the_caller_column(tmp_path: Path) -> None:
    """A ledger written before callers were recorded reads as no spend, and is upgraded when next written."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA.replace(",\n    caller TEXT", ""))
    assert "caller" not in {row[1] for row in db.execute("PRAGMA table_info(calls)")}
    db.execute(
        "INSERT INTO calls (call_id, ts, surface, stream, fallback, outcome, attempts) "
        "VALUES ('o', 1, 'g', 0, 0, 'ok', 0)"
    )
    db.commit()
    db.close()
    assert spend_by_caller(path, 0.0) == {}
    assert spend_by_caller(tmp_path / "missing.sqlite3", 0.0) == {}

    async def write() -> None:
        ledger = Ledger(path, batch_delay=0)
        ledger.record(record("c", 10.0, "team", 2.0))
        await ledger.aclose()

    asyncio.run(write())
    assert spend_by_caller(path, 0.0) == {"team": 2.0}
