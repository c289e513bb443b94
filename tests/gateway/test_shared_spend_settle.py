"""Spend limits through Redis: each call settles its ledger record's figure, and no reservation is left behind."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from gateway_support import get, post
from test_gateway_limits import CHAT, TEAM_KEY, Upstream
from test_gateway_limits_redis import config

from fakes import FakeClock
from servers import RedisServer
from turnout import Client
from turnout.core.attribution import Attempt
from turnout.core.types import ChatRequest, StreamEvent, Usage
from turnout.gateway import Gateway, GatewayServer, shared_spend
from turnout.gateway.shared_spend import SharedBusy, SharedSpend, SharedUnavailable
from turnout.gateway.spend import Hold, SpendBook
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger

pytestmark = pytest.mark.redis


class SilentStream(Upstream):
    """An upstream whose stream sends nothing until its gate opens (whole calls: :class:`Upstream`'s)."""

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.arrived += 1
        self.on_arrival()
        await self.gate.wait()
        for event in ():
            yield event


class WatchedLedger(Ledger):
    """A ledger that says when it was given a call's record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, batch_delay=0)
        self.given_record = asyncio.Event()

    def record(self, call: CallRecord) -> None:
        super().record(call)
        self.given_record.set()


@asynccontextmanager
async def host(text: str, upstream: Upstream, ledger: Ledger | None = None) -> AsyncIterator[GatewayServer]:
    """A gateway with its own ledger file over ``upstream``."""
    clock = FakeClock()
    client = Client.from_toml(
        text,
        adapter_builder=lambda *_: upstream,
        env=clock.env,
        surface="gateway",
        ledger=ledger if ledger is not None else True,
    )
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


def shared_of(server: GatewayServer) -> SharedSpend:
    spend = server.gateway.spend
    assert spend is not None and spend.shared is not None
    return spend.shared


async def redis_day(url: str) -> tuple[float, int]:
    """What Redis counts for the key ``team``: settled spend (every host), and reservations held."""
    r = aioredis.from_url(url)
    try:
        spent = 0.0
        for key in await r.keys("turnout:spend:*:team"):
            spent += sum(float(v) for v in await r.hvals(key))
        held = 0
        for key in await r.keys("turnout:resv:*:team"):
            held += await r.hlen(key)
    finally:
        await r.aclose()
    return spent, held


def ledger_cost(path: Path) -> float:
    db = sqlite3.connect(path)
    try:
        (cost,) = db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM calls WHERE caller = 'team'").fetchone()
    finally:
        db.close()
    return float(cost)


async def hang_up(server: GatewayServer, upstream: Upstream, body: dict[str, object]) -> None:
    """Send ``body`` as the key ``team`` and go away once the upstream has it (before any answer)."""
    arrived = asyncio.Event()
    upstream.on_arrival = arrived.set
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {TEAM_KEY}"}
        task = asyncio.ensure_future(session.post(server.url + "/v1/chat/completions", json=body, headers=headers))
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(500):  # the gateway sees the hang-up and ends the request (its call may go on)
        if server.gateway.in_flight == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the gateway did not see the client go away")


@pytest.mark.parametrize("stream", [True, False])
async def test_a_call_the_client_hangs_up_on_settles_its_ledger_figure_in_redis(
    tmp_path: Path, redis_url: str, stream: bool
) -> None:
    """A stream abandoned before its first event, or a whole call the client hangs up on, settles in Redis what
    its ledger record says it cost (not $0), and leaves no reservation.
    """
    upstream = SilentStream()
    path = tmp_path / "host.sqlite3"
    ledger = WatchedLedger(path)
    async with host(config(path, redis_url, limit=100.0), upstream, ledger) as server:
        await hang_up(server, upstream, {**CHAT, "stream": stream, "max_tokens": 1000})
        upstream.gate.set()  # a whole call's upstream try ends with the provider's usage
        await ledger.given_record.wait()
        await shared_of(server).settled()
        spent, held = await redis_day(redis_url)
        await ledger.flush()
        cost = ledger_cost(path)
    assert cost > 0
    assert (spent, held) == (pytest.approx(cost), 0)


async def test_more_limited_calls_at_once_than_redis_pool_default_get_no_503(tmp_path: Path, redis_url: str) -> None:
    """150 limited calls at once (more than redis-py's default pool of 100): every one is served, none is refused
    as if Redis were unreachable, and each settles.
    """
    upstream = Upstream()
    calls = 150
    everyone = asyncio.Event()
    upstream.on_arrival = lambda: everyone.set() if upstream.arrived >= calls else None
    async with host(config(tmp_path / "host.sqlite3", redis_url, limit=100.0), upstream) as server:
        statuses: list[int] = []

        async def one(session: aiohttp.ClientSession) -> None:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            async with session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp:
                await resp.read()
                statuses.append(resp.status)
                if resp.status != 200:
                    everyone.set()  # one was refused: nothing waits for the rest to arrive

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(one(session)) for _ in range(calls)]
            await everyone.wait()
            upstream.gate.set()
            await asyncio.gather(*tasks)
        await shared_of(server).settled()
        spent, held = await redis_day(redis_url)
    assert statuses == [200] * calls
    assert (spent, held) == (pytest.approx(calls * 0.002), 0)


async def test_a_paused_redis_leaves_no_reservation_once_it_answers_again(
    tmp_path: Path, redis_url: str, redis_server: RedisServer
) -> None:
    """Calls that end while Redis is frozen (SIGSTOP) cannot settle; once it answers again (SIGCONT) their settles
    are sent again: no reservation is left, and the spend is counted once.
    """
    upstream = Upstream()
    calls = 90  # within redis-py's default pool: the pause alone is tested
    everyone = asyncio.Event()
    upstream.on_arrival = lambda: everyone.set() if upstream.arrived >= calls else None
    async with host(config(tmp_path / "host.sqlite3", redis_url, limit=100.0), upstream) as server:
        shared = shared_of(server)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}

            async def one() -> int:
                async with session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        everyone.set()  # one was refused: nothing waits for the rest to arrive
                    return resp.status

            tasks = [asyncio.create_task(one()) for _ in range(calls)]
            await everyone.wait()
            with redis_server.paused():
                upstream.gate.set()
                statuses = await asyncio.gather(*tasks)
                await shared.settled()  # every settle failed: Redis does not answer
                unsettled = shared.unsettled
        assert await shared.flushed(within=10.0)
        spent, held = await redis_day(redis_url)
    assert statuses == [200] * calls and unsettled > 0
    assert (spent, held) == (pytest.approx(calls * 0.002), 0)


async def test_status_shows_what_redis_holds_for_a_key_on_every_host(tmp_path: Path, redis_url: str) -> None:
    """``/status`` on one host shows the reservations of another host's calls in flight (what Redis holds), and
    nothing once they are settled.
    """
    upstream = Upstream()
    everyone = asyncio.Event()
    upstream.on_arrival = lambda: everyone.set() if upstream.arrived >= 3 else None
    extra = 'api_keys = ["gw-admin-1"]\n'
    async with AsyncExitStack() as stack:
        a, b = [
            await stack.enter_async_context(
                host(config(tmp_path / f"{n}.sqlite3", redis_url, limit=1.0, extra=extra), upstream)
            )
            for n in "ab"
        ]
        calls = [asyncio.ensure_future(post(a, "/v1/chat/completions", CHAT, key=TEAM_KEY)) for _ in range(3)]
        await everyone.wait()
        spend = a.gateway.spend
        assert spend is not None
        held_by_a = spend.reserved("team")  # its calls' worst cases
        during = (await get(b, "/status", key="gw-admin-1")).json()["keys"][0]
        upstream.gate.set()
        statuses = [r.status for r in await asyncio.gather(*calls)]
        await shared_of(a).settled()
        after = (await get(b, "/status", key="gw-admin-1")).json()["keys"][0]
    assert statuses == [200] * 3
    assert held_by_a > 0 and (during["in_flight"], during["reserved_usd"]) == (3, pytest.approx(held_by_a))
    assert (after["in_flight"], after["reserved_usd"]) == (0, 0)


async def test_redis_restarted_empty_does_not_give_the_key_a_new_day(
    tmp_path: Path, redis_url: str, redis_server: RedisServer
) -> None:
    """Two hosts on a $0.005 limit: host A spent $0.006, then Redis restarted empty; host B's next call is refused,
    as host A raises its spend from its ledger before Redis admits again.
    """
    upstream = Upstream()
    upstream.gate.set()
    async with AsyncExitStack() as stack:
        a, b = [
            await stack.enter_async_context(host(config(tmp_path / f"{n}.sqlite3", redis_url, limit=0.005), upstream))
            for n in "ab"
        ]
        spent_by_a = [(await post(a, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status for _ in range(3)]
        assert (await post(a, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status == 429
        redis_server.stop()
        redis_server.start()  # empty: no persistence
        after = await post(b, "/v1/chat/completions", CHAT, key=TEAM_KEY)
    assert spent_by_a == [200, 200, 200]
    assert after.status == 429 and after.json()["error"]["code"] == "daily_limit_exceeded"


async def test_a_reservation_of_a_process_that_died_stops_counting_within_its_lease(
    tmp_path: Path, redis_url: str
) -> None:
    """A process that died holding a reservation (never settled, never renewed) no longer holds the key a minute
    later, whatever PID the machine gives the next process; a live process's call keeps its reservation as long as
    it runs.
    """
    now = [20000 * 86400.0 + 7.0]
    day = 20000 * 86400.0
    dead = SharedSpend(redis_url, prefix="turnout:", ledger_path=tmp_path / "a.sqlite3", clock=lambda: now[0])
    other = SharedSpend(redis_url, prefix="turnout:", ledger_path=tmp_path / "b.sqlite3", clock=lambda: now[0])
    assert await dead.reserve("team", "dead-call", 1.0, 1.0, day, None, None) == 1
    await dead.aclose()  # it never settles nor renews again
    assert await other.reserve("team", "next", 0.1, 1.0, day, None, None) == 0
    now[0] += 60.0
    assert await other.reserve("team", "long-call", 1.0, 1.0, day, None, None) == 1
    for _ in range(6):  # a long call of a live process: renewed while it runs
        now[0] += 20.0
        await other.renew()
    third = SharedSpend(redis_url, prefix="turnout:", ledger_path=tmp_path / "c.sqlite3", clock=lambda: now[0])
    assert await third.reserve("team", "late", 0.1, 1.0, day, None, None) == 0
    await other.aclose()
    await third.aclose()


def record_of(call_id: str, cost: float) -> CallRecord:
    attempt = Attempt(
        provider="openai.main",
        model="gpt-4.1",
        outcome="cancelled",
        cost_usd=cost,
        usage=Usage(input_tokens=7, output_tokens=3),
    )
    return CallRecord(
        call_id=call_id,
        ts=20000 * 86400.0 + 9.0,
        surface="gateway",
        stream=False,
        requested=None,
        served=None,
        fallback=False,
        outcome="cancelled",
        attempts=(attempt,),
        caller="team",
    )


async def test_a_reservation_is_settled_by_its_call_s_record_even_after_the_request_ended(
    tmp_path: Path, redis_url: str
) -> None:
    """A request that ends before its call's record keeps its reservation until the record comes, then settles the
    record's cost in Redis; a request whose call never began releases its reservation when it ends.
    """
    now = [20000 * 86400.0 + 7.0]
    ledger = Ledger(tmp_path / "l.sqlite3", batch_delay=0)
    shared = SharedSpend(redis_url, prefix="turnout:", ledger_path=ledger.path, clock=lambda: now[0])
    book = SpendBook(ledger, clock=lambda: now[0], shared=shared)
    ledger.listener = book
    book.spent("team")
    late = await book.reserve("team", 0.5, 10.0, "late-call")
    never = await book.reserve("team", 0.25, 10.0, "never-began")
    assert isinstance(late, Hold) and isinstance(never, Hold)
    book.opened("late-call")  # what a Call does when it begins
    book.ended(late)
    book.ended(never)
    await shared.settled()
    assert book.reserved("team") == 0.5 and await shared.held("team", late.day) == (0.5, 1)
    ledger.record(record_of("late-call", 0.125))
    book.ended(late)  # again: nothing more
    await shared.settled()
    assert book.reserved("team") == 0 and await shared.held("team", late.day) == (0.0, 0)
    assert (await redis_day(redis_url))[0] == pytest.approx(0.125)
    await book.aclose()
    await ledger.aclose()


async def test_a_full_pool_waits_then_is_busy_not_unreachable(
    tmp_path: Path, redis_url: str, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one Redis connection, 20 reservations at once wait their turn and all succeed; when the one connection
    stays taken past the wait, a reservation fails as busy, while Redis is still taken for reachable.
    """
    monkeypatch.setattr(shared_spend, "POOL_WAIT_S", 0.2)
    day = 20000 * 86400.0
    shared = SharedSpend(redis_url, prefix="turnout:", ledger_path=tmp_path / "a.sqlite3", max_connections=1)
    outcomes = await asyncio.gather(*(shared.reserve("team", f"c{n}", 0.01, 1.0, day, None, None) for n in range(20)))
    assert outcomes == [1] * 20
    with redis_server.paused():
        stuck = asyncio.ensure_future(shared.reserve("team", "stuck", 0.01, 1.0, day, None, None))
        await asyncio.sleep(0)  # one turn of the loop: it takes the connection and sends its command
        with pytest.raises(SharedBusy):
            await shared.reserve("team", "waiting", 0.01, 1.0, day, None, None)
        busy_while_reachable = shared.reachable
        with pytest.raises(SharedUnavailable):
            await stuck
    assert busy_while_reachable and shared.busy == 1
    await shared.aclose()


#: A gateway process in miniature with spend limits in Redis: it reserves one call ($0.50) and is killed before
#: the call's record is written.
KILLED_HOST = """
import asyncio, sys
from turnout.gateway.shared_spend import SharedSpend
from turnout.gateway.spend import SpendBook
from turnout.ledger.writer import Ledger

async def main():
    ledger = Ledger(sys.argv[1], batch_delay=0)
    shared = SharedSpend(sys.argv[2], prefix="turnout:", ledger_path=sys.argv[1])
    book = SpendBook(ledger, shared=shared)
    hold = await book.reserve("team", 0.5, 100.0, "answered-not-written")
    assert hold is not None and hold.redis and hold.shared, hold
    print("ready", flush=True)
    sys.stdin.read()  # until killed

asyncio.run(main())
"""


def killed_host(path: Path, redis_url: str) -> None:
    """Run :data:`KILLED_HOST` on this tree's package until it holds its reservation, then SIGKILL it."""
    import os
    import subprocess
    import sys

    import turnout

    env = {**os.environ, "PYTHONPATH": str(Path(turnout.__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_HOST, str(path), redis_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "ready\n"
    finally:
        child.kill()
        child.communicate(timeout=10)
    assert child.returncode == -9


async def test_a_host_killed_with_a_call_in_flight_bills_it_in_redis_when_it_starts_again(
    tmp_path: Path, redis_url: str
) -> None:
    """After kill -9 of a host whose call held a Redis reservation, its next start bills it (worst case), in Redis too.

    Redis alone forgets the call (its reservation is a lease); the ledger file holds it as well, so the restarted host
    bills it (``process_died``) and raises its spend in Redis to what its file holds.
    """
    path = tmp_path / "ledger.sqlite3"
    killed_host(path, redis_url)
    ledger = Ledger(path, batch_delay=0)
    shared = SharedSpend(redis_url, prefix="turnout:", ledger_path=path)
    book = SpendBook(ledger, shared=shared)
    try:
        await book.reconcile()  # what `turnout serve` does at start-up
        assert ledger_cost(path) == pytest.approx(0.5)
        spent, _ = await redis_day(redis_url)
        assert spent == pytest.approx(0.5)
    finally:
        await shared.aclose()
        await ledger.aclose()
