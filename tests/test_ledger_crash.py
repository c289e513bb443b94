"""A process killed with its last calls unwritten: what it reserved is billed when the file is opened again."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import turnout
import turnout.ledger.reservations as reservations
from turnout.core.attribution import Attempt, RouteRef
from turnout.ledger.reservations import owner_alive, process_identity
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger, summarize

BOUND = 10.0  # seconds any flush, close or child's start may take in these tests
ROUTE = RouteRef(provider="openai.main", model="gpt-4.1")

#: A gateway process in miniature: it reserves each call's worst case ($0.50), records what the call cost, and
#: is killed while its writer waits (``batch_delay``) with the last calls queued, as in a busy process.
CHILD = """
import asyncio, sys, time
from turnout.core.attribution import Attempt, RouteRef
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger

ROUTE = RouteRef(provider="openai.main", model="gpt-4.1")

def record(call_id, cost):
    attempt = Attempt(provider=ROUTE.provider, model=ROUTE.model, outcome="ok", cost_usd=cost, started_at=time.time())
    return CallRecord(call_id=call_id, ts=time.time(), surface="openai", stream=False, requested=ROUTE, served=ROUTE,
                      fallback=False, outcome="ok", attempts=(attempt,), accepted_index=0, caller="team")

async def main():
    led = Ledger(sys.argv[1], batch_delay=0)
    now = time.time()
    day = now - now % 86400
    assert await led.reserve("written", "team", 0.5, 100.0, day)
    led.record(record("written", 0.2))
    led.release("written")
    assert await led.flush()
    led.batch_delay = 3600.0  # from here the writer holds what it is given
    for n in range(3):  # answered, recorded and released: still queued
        assert await led.reserve(f"answered-{n}", "team", 0.5, 100.0, day)
        led.record(record(f"answered-{n}", 0.1))
        led.release(f"answered-{n}")
    assert await led.reserve("in-flight", "team", 0.5, 100.0, day)  # sent, not answered yet
    print("ready", flush=True)
    sys.stdin.read()  # until killed

asyncio.run(main())
"""


def rows(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def today() -> float:
    now = time.time()
    return now - now % 86400.0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite3"


def start_child(path: Path) -> subprocess.Popen[str]:
    """The child above, on this tree's package, once it holds its reservations and queued its last calls."""
    env = {**os.environ, "PYTHONPATH": str(Path(turnout.__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    if child.stdout.readline() != "ready\n":
        child.kill()
        child.communicate(timeout=BOUND)
        pytest.fail("the child process did not reach its reservations")
    return child


def kill(child: subprocess.Popen[str]) -> None:
    child.kill()  # SIGKILL: nothing of the process runs after it
    child.communicate(timeout=BOUND)  # reaped, its pipes closed
    assert child.returncode == -9


async def test_a_killed_process_s_answered_and_running_calls_are_billed_at_their_worst_case(path: Path) -> None:
    """After SIGKILL, a ledger opening the file bills each unwritten call at its reservation, once, and frees it."""
    child = start_child(path)
    kill(child)
    assert rows(path, "SELECT call_id FROM calls") == [("written",)]  # the answered calls' records are lost
    led = Ledger(path, batch_delay=0)
    try:
        billed = rows(path, "SELECT call_id, outcome, cost_usd, caller FROM calls ORDER BY call_id")
        assert billed == [
            ("answered-0", "process_died", 0.5, "team"),
            ("answered-1", "process_died", 0.5, "team"),
            ("answered-2", "process_died", 0.5, "team"),
            ("in-flight", "process_died", 0.5, "team"),
            ("written", "ok", 0.2, "team"),
        ]
        assert rows(path, "SELECT call_id FROM reservations") == []
        assert summarize(path).usage_notes == {"reserved": (4, 2.0)}
        assert await led.spend_since(today()) == ({"team": 2.2}, {})
        # $2.20 spent, nothing held: under a $2.30 limit the key is admitted
        assert await led.reserve("next", "team", 0.5, 2.3, today())
    finally:
        await asyncio.wait_for(led.aclose(), BOUND)
    again = Ledger(path, batch_delay=0)  # a second opening bills nothing twice
    await asyncio.wait_for(again.aclose(), BOUND)
    assert rows(path, "SELECT COUNT(*), SUM(cost_usd) FROM calls") == [(5, 2.2)]


async def test_a_dead_process_s_reservation_under_this_process_s_pid_is_billed(path: Path) -> None:
    """A restarted process with the dead one's PID (a container) bills the dead one's reservations, not holds them."""
    child = start_child(path)
    kill(child)
    db = sqlite3.connect(path)
    try:  # the dead process's rows, as if it had had this process's PID
        columns = {row[1] for row in db.execute("PRAGMA table_info(reservations)")}
        with db:
            db.execute("UPDATE reservations SET pid = ?", (os.getpid(),))
            if "owner" in columns:
                db.execute(
                    "UPDATE reservations SET owner = replace(owner, ?, ?)", (f"/{child.pid}/", f"/{os.getpid()}/")
                )
    finally:
        db.close()
    led = Ledger(path, batch_delay=0)
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(path, "SELECT call_id FROM reservations") == []
    assert rows(path, "SELECT COUNT(*), SUM(cost_usd) FROM calls WHERE outcome = 'process_died'") == [(4, 2.0)]


async def test_a_live_process_s_reservations_hold_until_it_is_killed(path: Path) -> None:
    """A running process's reservations hold; once it is killed, the next reservation bills them."""
    child = start_child(path)
    try:
        led = Ledger(path, batch_delay=0)
        assert rows(path, "SELECT COUNT(*) FROM reservations") == [(4,)]
        assert not await led.reserve("mine-1", "team", 0.5, 2.2, today())  # $0.20 spent + $2.00 held
    finally:
        kill(child)
    try:
        assert await led.reserve("mine-2", "team", 0.5, 2.3, today())  # $2.20 spent, nothing held
        assert rows(path, "SELECT COUNT(*) FROM calls WHERE outcome = 'process_died'") == [(4,)]
    finally:
        await asyncio.wait_for(led.aclose(), BOUND)


def _reservation(path: Path, call_id: str, owner: str, pid: int, lease: float | None) -> None:
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute(
                "INSERT INTO reservations (call_id, caller, amount, pid, expires, owner, ts, lease) "
                "VALUES (?, 'team', 1.0, ?, ?, ?, ?, ?)",
                (call_id, pid, time.time() + 3600.0, owner, time.time(), lease),
            )
    finally:
        db.close()


async def test_a_written_call_whose_reservation_was_left_is_not_billed_twice(path: Path) -> None:
    """A process killed between writing a call's record and dropping its reservation: the record bills it."""
    led = Ledger(path, batch_delay=0)
    attempt = Attempt(provider=ROUTE.provider, model=ROUTE.model, outcome="ok", cost_usd=0.2, started_at=time.time())
    led.record(
        CallRecord(
            call_id="c1",
            ts=time.time(),
            surface="openai",
            stream=False,
            requested=ROUTE,
            served=ROUTE,
            fallback=False,
            outcome="ok",
            attempts=(attempt,),
            accepted_index=0,
            caller="team",
        )
    )
    await asyncio.wait_for(led.aclose(), BOUND)
    _reservation(path, "c1", "token/dead", 2**22 + 1, None)
    await asyncio.wait_for(Ledger(path).aclose(), BOUND)
    assert rows(path, "SELECT call_id, outcome, cost_usd FROM calls") == [("c1", "ok", 0.2)]
    assert rows(path, "SELECT COUNT(*) FROM attempts") == [(1,)]
    assert rows(path, "SELECT call_id FROM reservations") == []


def test_an_identity_is_this_process_s_start_and_tells_a_reused_pid_apart() -> None:
    """This process's identity is alive; the same PID with another start time is a dead process's."""
    mine = process_identity()
    now = time.time()
    assert owner_alive(mine, os.getpid(), None, now)
    parts = mine.split("/")
    if parts[0] == "token":
        pytest.skip("/proc does not tell start times here")
    other_start = "/".join([*parts[:3], str(int(parts[3]) + 1)])
    assert not owner_alive(other_start, os.getpid(), now + 60.0, now)  # its lease does not save it


def test_an_owner_this_process_cannot_see_is_judged_by_its_lease() -> None:
    """A reservation of another host or PID namespace, or of a token, lives while its lease does."""
    now = time.time()
    for owner in ("another-boot/pid:[1]/77/123", "token/0123abcd"):
        assert owner_alive(owner, os.getpid(), now + 1.0, now)
        assert not owner_alive(owner, os.getpid(), now - 1.0, now)
        assert not owner_alive(owner, os.getpid(), None, now)


async def test_the_writer_renews_the_leases_of_its_reservations(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a call holds its reservation, the writer extends the reservation's lease."""
    led = Ledger(path, batch_delay=0)
    try:
        assert await led.reserve("c1", "team", 0.5, 10.0, today())
        ((first,),) = rows(path, "SELECT lease FROM reservations")
        assert first <= time.time() + reservations.LEASE_S
        monkeypatch.setattr(reservations, "LEASE_S", 3600.0)
        assert await asyncio.wait_for(led.flush(), BOUND)
        ((renewed,),) = rows(path, "SELECT lease FROM reservations")
        assert renewed > first + 3000.0
    finally:
        await asyncio.wait_for(led.aclose(), BOUND)
