"""The ledger writer under faults: values SQLite cannot store, a stuck writer, a full disk, a moved or deleted file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import turnout.ledger.rows as rows_module
from turnout.core.attribution import Attempt, RouteRef
from turnout.core.types import Usage
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger, LedgerUnavailable

BOUND = 10.0  # seconds any flush or close may take in these tests
ROUTE = RouteRef(provider="openai.main", model="gpt-4.1")
TS = 20000 * 86400.0 + 3600.0


def call(
    call_id: str, *, usage: Usage | None = None, cost: float | None = 0.5, caller: str | None = "team"
) -> CallRecord:
    attempt = Attempt(
        provider=ROUTE.provider, model=ROUTE.model, outcome="ok", usage=usage, cost_usd=cost, started_at=TS
    )
    return CallRecord(
        call_id=call_id,
        ts=TS,
        surface="gateway",
        stream=False,
        requested=ROUTE,
        served=ROUTE,
        fallback=False,
        outcome="ok",
        attempts=(attempt,),
        accepted_index=0,
        caller=caller,
    )


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite3"


class Disk:
    """An injected write failure: while ``full``, every insert fails as SQLite does on a full disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.message = "database or disk is full"
        real = rows_module._insert

        def insert(db: sqlite3.Connection, *rows: Any) -> None:
            if self.full:
                raise sqlite3.OperationalError(self.message)
            real(db, *rows)

        monkeypatch.setattr(rows_module, "_insert", insert)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def ledger_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "turnout.ledger" and r.levelno == level]


async def test_a_usage_beyond_sqlite_integers_does_not_stop_the_writer(path: Path) -> None:
    """A count of 2**64-1 and a cost of 1e300 in a batch: the good calls of the batch and every later call are
    written, the bad one is kept sanitised and counted, and flush returns.
    """
    led = Ledger(path, batch_delay=0)
    huge = Usage(input_tokens=2**64 - 1, output_tokens=5)
    for record in (call("good-1"), call("bad", usage=huge, cost=float("inf")), call("good-2")):
        led.record(record)
    assert await asyncio.wait_for(led.flush(), BOUND)
    led.record(call("later"))
    assert await asyncio.wait_for(led.flush(), BOUND)
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(path, "SELECT call_id FROM calls ORDER BY call_id") == [("bad",), ("good-1",), ("good-2",), ("later",)]
    assert rows(path, "SELECT input_tokens, output_tokens, usage_note FROM attempts WHERE call_id = 'bad'") == [
        (None, 5, "sanitised")
    ]
    assert (led.sanitised, led.errors) == (1, 1) and led.health.ok
    # the sanitised call lost its cost in the file: it stays counted as unwritten spend
    assert led.given("team", TS) == float("inf")


async def test_flush_and_close_return_in_bounded_time_when_the_writer_is_stuck(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer blocked inside SQLite does not hold up flush or close beyond ``flush_timeout``."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(db: sqlite3.Connection, *rows: Any) -> None:
        entered.set()
        release.wait(BOUND)

    monkeypatch.setattr(rows_module, "_insert", stuck)
    led = Ledger(path, batch_delay=0, flush_timeout=0.05)
    led.record(call("c"))
    await asyncio.to_thread(entered.wait, BOUND)
    try:
        assert not await asyncio.wait_for(led.flush(), BOUND)
        with pytest.raises(LedgerUnavailable):  # what a spend limit's refresh asks: bounded too
            await asyncio.wait_for(led.spend_since(TS), BOUND)
        await asyncio.wait_for(led.aclose(), BOUND)
    finally:
        release.set()


@pytest.mark.parametrize("message", ["database or disk is full", "attempt to write a readonly database"])
async def test_a_full_disk_is_logged_once_kept_and_written_when_it_clears(
    path: Path, disk: Disk, caplog: pytest.LogCaptureFixture, message: str
) -> None:
    """While the file refuses writes: one error logged, health says so, calls kept and still counted; when it takes
    writes again: one line logged and every kept call written.
    """
    caplog.set_level(logging.WARNING, logger="turnout.ledger")
    led = Ledger(path, batch_delay=0)
    disk.full, disk.message = True, message
    for n in range(3):
        led.record(call(f"c{n}"))
        assert not await asyncio.wait_for(led.flush(), BOUND)
    health = led.health
    assert not health.ok and health.pending == 3 and health.errors >= 3
    assert health.problem is not None and message in health.problem
    assert len(ledger_records(caplog, logging.ERROR)) == 1
    totals, written = await led.spend_since(TS)
    assert totals == {} and written == {}
    assert led.given("team", TS) == 1.5  # given, not written: a limit still counts it
    disk.full = False
    assert await asyncio.wait_for(led.flush(), BOUND)
    assert led.health.ok and led.health.pending == 0
    assert len(ledger_records(caplog, logging.WARNING)) == 1
    assert await led.spend_since(TS) == ({"team": 1.5}, {"team": 1.5})
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(path, "SELECT COUNT(*) FROM calls") == [(3,)]


def _move(path: Path, to: Path | None) -> None:
    for suffix in ("", "-wal", "-shm"):
        src = path.with_name(path.name + suffix)
        if src.exists():
            if to is None:
                src.unlink()
            else:
                src.rename(to.with_name(to.name + suffix))


@pytest.mark.parametrize("how", ["moved", "deleted"])
async def test_the_writer_reopens_its_path_when_the_file_it_holds_is_gone(
    path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """When the configured path no longer names the file being written, the next calls go to a new file there."""
    caplog.set_level(logging.WARNING, logger="turnout.ledger")
    led = Ledger(path, batch_delay=0)
    led.record(call("before"))
    assert await asyncio.wait_for(led.flush(), BOUND)
    moved = path.with_name("rotated.sqlite3")
    _move(path, moved if how == "moved" else None)
    led.record(call("after"))
    assert await asyncio.wait_for(led.flush(), BOUND)
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(path, "SELECT call_id FROM calls") == [("after",)]
    if how == "moved":
        assert rows(moved, "SELECT call_id FROM calls") == [("before",)]
    assert any("reopening" in m for m in ledger_records(caplog, logging.WARNING))


@pytest.mark.parametrize("how", ["moved", "deleted"])
async def test_a_file_left_behind_still_counts_for_the_day(path: Path, how: str) -> None:
    """What the file held when the writer left it counts in the day's totals and in reservations, beside what
    the new file at the path holds.
    """
    led = Ledger(path, batch_delay=0)
    now = time.time()
    today = now - now % 86400.0

    def today_call(call_id: str) -> CallRecord:
        return dataclasses.replace(call(call_id), ts=now)

    led.record(today_call("before"))
    assert await asyncio.wait_for(led.flush(), BOUND)
    moved = path.with_name("rotated.sqlite3")
    _move(path, moved if how == "moved" else None)
    led.record(today_call("after"))
    assert await asyncio.wait_for(led.flush(), BOUND)
    assert await led.spend_since(today) == ({"team": 1.0}, {"team": 1.0})
    assert not await led.reserve("r1", "team", 0.1, 1.0, today)  # $1 spent of a $1 limit, across both files
    assert await led.reserve("r2", "team", 0.1, 1.1, today)
    await asyncio.wait_for(led.aclose(), BOUND)


def _hold(path: Path, call_id: str, pid: int, expires: float) -> None:
    """A reservation of $1 for ``team`` written into the file as another process of an older version would."""
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute(
                "INSERT INTO reservations (call_id, caller, amount, pid, expires) VALUES (?, 'team', 1.0, ?, ?)",
                (call_id, pid, expires),
            )
    finally:
        db.close()


async def test_a_reservation_of_a_dead_process_or_past_its_expiry_is_dropped(path: Path) -> None:
    """A $1 limit fully held by another process's reservation refuses; once that process is gone, its
    reservation is billed (it may have died before writing the call) and no longer held; one past its expiry is
    dropped.
    """
    led = Ledger(path, batch_delay=0)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.read()", stdin=subprocess.PIPE
    )
    try:
        _hold(path, "theirs", child.pid, time.time() + 3600.0)
        assert not await led.reserve("mine-1", "team", 0.1, 1.0, TS)  # held by a live process
    finally:
        await child.communicate(b"")  # it ends; its pid is free
    assert await led.reserve("mine-2", "team", 0.1, 2.0, TS)  # $1 billed, no longer held twice
    assert rows(path, "SELECT call_id, cost_usd FROM calls") == [("theirs", 1.0)]
    _hold(path, "stale", os.getpid(), time.time() - 1.0)  # a live process, but past the reservation's expiry
    assert await led.reserve("mine-3", "team", 0.1, 2.0, TS)
    held = rows(path, "SELECT call_id FROM reservations ORDER BY call_id")
    await asyncio.wait_for(led.aclose(), BOUND)
    assert held == [("mine-2",), ("mine-3",)]


SMALL_DISK = """
import asyncio, json, resource, signal, sys
sys.path[:0] = [sys.argv[2]]
from test_ledger_faults import call
from turnout.ledger.writer import Ledger

async def main() -> None:
    led = Ledger(sys.argv[1], batch_delay=0, flush_timeout=5.0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write beyond the limit fails (EFBIG) instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
    for n in range(4000):
        led.record(call(f"call-{n:05d}-" + "x" * 200))
    await led.flush()
    h = led.health
    await led.aclose()
    print(json.dumps({"ok": h.ok, "pending": h.pending, "problem": h.problem}))

asyncio.run(main())
"""


def test_a_file_size_limit_makes_the_ledger_report_trouble_and_exit(path: Path, tmp_path: Path) -> None:
    """With the file size capped (a full small disk), the writer reports the failure, keeps the calls and the
    process still exits in bounded time.
    """
    script = tmp_path / "small_disk.py"
    script.write_text(SMALL_DISK)
    done = subprocess.run(
        [sys.executable, str(script), str(path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ok"] is False and out["pending"] > 0 and out["problem"]
