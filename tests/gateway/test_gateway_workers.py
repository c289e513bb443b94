"""Several workers, one server: /metrics and /status merge every worker's published totals, and only fresh ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import orjson
from gateway_support import TWO_PROFILES, get, post, sample

from fakes import FakeClock, Fleet, err
from turnout import Client
from turnout.core.attribution import Attempt
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.workers import (
    LAST_ATTEMPTS,
    MAX_AGE_S,
    Peers,
    RestartBudget,
    Totals,
    decode,
    encode,
    merge,
    publish_restarts,
    read_restarts,
)
from turnout.state.base import BreakerRecord
from turnout.state.dead_keys import KeyHealth
from turnout.walk.hedge import HedgeTally
from turnout.walk.pools import MemberLoad

BASE = TWO_PROFILES.replace('api_keys = ["sk-ant-POOL-1", "sk-ant-POOL-2"]', 'api_key = "sk-ant-PLANTED"').replace(
    "[reliability]\n", "[reliability.breaker]\nenabled = false\n[reliability]\n"
)
CHAT = {"model": "", "messages": [{"role": "user", "content": "hello"}]}


@asynccontextmanager
async def worker(directory: Path, name: str, clock: FakeClock, fleet: Fleet) -> AsyncIterator[GatewayServer]:
    """A gateway publishing to ``directory`` as worker ``name``, over fake adapters and a shared fake clock."""
    client = Client.from_toml(BASE, adapter_builder=fleet, env=clock.env, ledger=False)
    peers = Peers(directory, worker=name, clock=clock)
    async with GatewayServer(Gateway(client, owns_client=True, peers=peers)) as server:
        yield server


async def publish(*servers: GatewayServer) -> None:
    """Each worker publishes its totals now (as its timer does every second)."""
    for server in servers:
        gateway = server.gateway
        assert gateway.peers is not None
        await gateway.peers.publish(gateway.totals())


async def test_each_worker_answers_with_every_workers_counts(tmp_path: Path) -> None:
    """Requests served by two workers are counted once each in /metrics and /status, whichever worker answers."""
    clock = FakeClock()
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(worker(tmp_path, "a", clock, Fleet(anthropic__prod=["from a"])))
        b = await stack.enter_async_context(
            worker(tmp_path, "b", clock, Fleet(anthropic__prod=[err(503)], openai__backup=["from b"]))
        )
        for _ in range(2):
            await post(a, "/v1/chat/completions", CHAT)
        for _ in range(3):
            await post(b, "/v1/chat/completions", CHAT)
        await publish(a, b)
        texts = [(await get(s, "/metrics")).body.decode() for s in (a, b)]
        statuses = [(await get(s, "/status")).json() for s in (a, b)]
    for text in texts:
        assert sample(text, "turnout_gateway_requests_total", surface="openai", status="200") == 5
        prod = {"provider": "anthropic.prod", "model": "claude-sonnet-4-5"}
        assert sample(text, "turnout_upstream_attempts_total", outcome="ok", **prod) == 2
        assert sample(text, "turnout_upstream_attempts_total", outcome="retryable", **prod) == 6  # 3 calls, 2 tries
        assert sample(text, "turnout_retries_total", **prod) == 3
        assert sample(text, "turnout_fallbacks_total", served_provider="openai.backup") == 3
        assert sample(text, "turnout_gateway_request_duration_seconds_count", surface="openai") == 5
        assert sample(text, "turnout_upstream_latency_seconds_count", provider="anthropic.prod") == 8
    for status in statuses:
        assert status["recent_attempts"]["by_outcome"] == {"ok": 5, "retryable": 6}
        assert sorted(w["worker"] for w in status["workers"]) == ["a", "b"]
    by_worker = {w["worker"]: w["requests"] for w in statuses[0]["workers"]}
    assert by_worker == {"a": 3, "b": 3}  # a: two chats and its /metrics scrape (live); b: three chats (published)


async def test_a_workers_cooldown_shows_in_every_workers_status(tmp_path: Path) -> None:
    """With the memory store each worker holds its own cooldowns; /status and /metrics show the union."""
    clock = FakeClock()
    limited = Fleet(anthropic__prod=[err(429, headers={"retry-after": "30"})], openai__backup=["ok"])
    async with worker(tmp_path, "a", clock, Fleet()) as a, worker(tmp_path, "b", clock, limited) as b:
        await post(b, "/v1/chat/completions", CHAT)
        await publish(b)
        clock.now += 3
        status = (await get(a, "/status")).json()
        text = (await get(a, "/metrics")).body.decode()
    assert status["cooldowns"] == [
        {"key": "anthropic.prod", "profile": "anthropic.prod", "key_id": None, "remaining_seconds": 27.0}
    ]
    assert [p["cooling_down"] for p in status["profiles"]] == [True, False]
    assert sample(text, "turnout_cooldowns_active") == 1


async def test_a_worker_that_stopped_publishing_stops_counting(tmp_path: Path) -> None:
    """A snapshot older than MAX_AGE_S (a worker gone or stuck) is left out of the totals."""
    clock = FakeClock()
    async with worker(tmp_path, "a", clock, Fleet()) as a, worker(tmp_path, "b", clock, Fleet()) as b:
        await post(b, "/v1/chat/completions", CHAT)
        await publish(b)
        clock.now += MAX_AGE_S
        fresh = (await get(a, "/status")).json()
        clock.now += 0.5
        stale = (await get(a, "/status")).json()
    assert fresh["recent_attempts"]["by_outcome"] == {"ok": 1}
    assert [w["worker"] for w in fresh["workers"]] == ["a", "b"]
    assert stale["recent_attempts"]["by_outcome"] == {}
    assert [w["worker"] for w in stale["workers"]] == ["a"]


async def test_a_stopped_worker_removes_its_file(tmp_path: Path) -> None:
    """A worker's snapshot file holds its totals while it runs and is removed when it stops."""
    clock = FakeClock()
    async with worker(tmp_path, "a", clock, Fleet()) as a:
        await publish(a)
        assert _names(tmp_path) == ["a.json"]
        assert decode((tmp_path / "a.json").read_bytes()) is not None
    assert _names(tmp_path) == []


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_a_gateway_without_peers_counts_itself_only(tmp_path: Path) -> None:
    """Without a workers directory, /status lists the answering process as the only worker."""
    client = Client.from_toml(BASE, adapter_builder=Fleet(), ledger=False)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        await post(server, "/v1/chat/completions", CHAT)
        status = (await get(server, "/status")).json()
    (own,) = status["workers"]
    assert own["in_flight"] == 1  # its own /status request
    assert 0.0 <= own["age_seconds"] < 1.0  # published just now (a loaded machine may take a few milliseconds)
    assert status["recent_attempts"]["by_outcome"] == {"ok": 1}


def _attempt(at: float, outcome: str = "ok", model: str = "m") -> Attempt:
    return Attempt(provider="openai.main", model=model, outcome=outcome, started_at=at, duration_ms=12.5)  # type: ignore[arg-type]


def test_merge_sums_histograms_by_bucket_and_keeps_the_newest_state() -> None:
    """Histogram rows add bucket by bucket; the later breaker, stronger dead key and newest headroom win."""
    own = Totals(
        worker="a",
        at=100.0,
        in_flight=1,
        histograms={"h": {("x",): [1.0, 0.0, 2.0, 0.5]}},
        breakers={"openai.main/m": BreakerRecord(opened_at=90.0, until=110.0, interval=20.0)},
        keys={"k1": KeyHealth(key_id="k1", since=50.0)},
        headroom=({"profile": "openai.main", "key_id": "k1", "requests": 5, "age": 30.0, "requests_reset_in": 10.0},),
        last=tuple(_attempt(float(i)) for i in range(0, 60, 2)),
    )
    peer = Totals(
        worker="b",
        at=98.0,
        in_flight=2,
        histograms={"h": {("x",): [0.0, 3.0, 1.0, 4.0], ("y",): [1.0, 0.0, 0.0, 0.1]}},
        breakers={"openai.main/m": BreakerRecord(opened_at=95.0, until=105.0, interval=10.0)},
        keys={"k1": KeyHealth(key_id="k1", since=60.0, strikes=1, dead_until=120.0)},
        headroom=({"profile": "openai.main", "key_id": "k1", "requests": 2, "age": 1.0, "requests_reset_in": 10.0},),
        last=tuple(_attempt(float(i)) for i in range(1, 60, 2)),
    )
    merged = merge(own, [peer], now=100.0)
    assert merged.in_flight == 3
    assert merged.histograms == {"h": {("x",): [1.0, 3.0, 3.0, 4.5], ("y",): [1.0, 0.0, 0.0, 0.1]}}
    assert merged.breakers["openai.main/m"].opened_at == 95.0
    assert merged.keys["k1"].strikes == 1
    assert merged.headroom == (
        {"profile": "openai.main", "key_id": "k1", "requests": 2, "age": 3.0, "requests_reset_in": 8.0},
    )
    assert [a.started_at for a in merged.last] == [float(i) for i in range(60 - LAST_ATTEMPTS, 60)]
    assert [(w.name, w.age) for w in merged.workers] == [("a", 0.0), ("b", 2.0)]


def test_merge_without_peers_is_the_workers_own_totals() -> None:
    """One worker: every total is its own, unchanged."""
    own = Totals(worker="a", at=5.0, in_flight=2, counters={"c": {("x",): 3.0}}, cooldowns={"p": 1.0})
    merged = merge(own, [], now=10.0)
    assert (merged.counters, merged.cooldowns, merged.in_flight) == (own.counters, own.cooldowns, 2)


def test_a_snapshot_survives_encoding_and_a_broken_one_is_ignored() -> None:
    """What a worker writes reads back the same; a truncated or foreign file reads as nothing."""
    totals = Totals(
        worker="7",
        at=3.5,
        in_flight=1,
        requests=4,
        counters={"c": {("openai", "200"): 4.0}},
        histograms={"h": {("openai",): [1.0, 3.0, 0.25]}},
        recent={10: {("openai.main", "ok"): 4}},
        last=(_attempt(3.0, "rate_limited", model="<b>x</b>"),),
        cooldowns={"openai.main": 30.0},
        keys={"abcd1234": KeyHealth(key_id="abcd1234", since=1.0, strikes=1, dead_until=61.0)},
        breakers={"openai.main/m": BreakerRecord(opened_at=1.0, until=6.0, interval=5.0)},
        transitions={("openai.main/m", "opened"): 1},
        headroom=({"profile": "openai.main", "key_id": None, "requests": 3},),
        pools=(("gpt", MemberLoad(member="openai.main", in_flight=1, calls=9, share=0.75, ttft_ms=210.5)),),
        hedging=HedgeTally(calls=40, hedged=3, hedge_wins=2, original_wins=1, budget=1.25),
    )
    raw = encode(totals)
    assert decode(raw) == totals
    assert decode(encode(replace(totals, hedging=None))) == replace(totals, hedging=None)
    assert decode(raw[:-5]) is None
    assert decode(orjson.dumps({"worker": "x"})) is None
    bad_outcome = orjson.loads(raw)
    bad_outcome["last"][0][3] = "invented"
    assert decode(orjson.dumps(bad_outcome)) is None


def _load(member: str, in_flight: int, calls: int, ttft_ms: float | None) -> MemberLoad:
    return MemberLoad(member=member, in_flight=in_flight, calls=calls, share=None, ttft_ms=ttft_ms)


def test_merge_sums_pool_members_and_weighs_their_speed_by_calls() -> None:
    """Calls and calls in flight add up; the time to first token is weighted by calls; shares are of the sums."""
    own = Totals(worker="a", at=1.0, pools=(("gpt", _load("east", 1, 30, 100.0)), ("gpt", _load("west", 0, 0, None))))
    peer = Totals(worker="b", at=1.0, pools=(("gpt", _load("east", 2, 10, 300.0)), ("gpt", _load("west", 1, 40, 50.0))))
    merged = {(pool, x.member): x for pool, x in merge(own, [peer], now=1.0).pools}
    east, west = merged[("gpt", "east")], merged[("gpt", "west")]
    assert (east.in_flight, east.calls, east.ttft_ms, east.share) == (3, 40, 150.0, 0.5)
    assert (west.in_flight, west.calls, west.ttft_ms, west.share) == (1, 40, 50.0, 0.5)


def test_merge_sums_hedging_counts_and_budgets_of_the_workers_that_hedge() -> None:
    """Calls, hedges and wins add up, and so do the budgets (each worker has its own bucket); None: no hedging."""
    own = Totals(worker="a", at=1.0, hedging=HedgeTally(calls=50, hedged=3, hedge_wins=2, original_wins=1, budget=0.5))
    peer = Totals(worker="b", at=1.0, hedging=HedgeTally(calls=30, hedged=1, hedge_wins=1, original_wins=0, budget=2.0))
    assert merge(own, [peer, Totals(worker="c", at=1.0)], now=1.0).hedging == HedgeTally(
        calls=80, hedged=4, hedge_wins=3, original_wins=1, budget=2.5
    )
    assert merge(Totals(worker="a", at=1.0), [Totals(worker="b", at=1.0)], now=1.0).hedging is None


def test_the_restart_budget_allows_a_bounded_number_of_restarts_per_window() -> None:
    """At most ``limit`` restarts in any ``window`` seconds; older ones stop counting, so a rare death restarts."""
    clock = FakeClock()
    budget = RestartBudget(limit=3, window=60.0, clock=clock)
    first = [budget.allow() for _ in range(4)]
    clock.now += 59.0
    still = budget.allow()
    clock.now += 1.5
    later = budget.allow()
    assert first == [True, True, True, False]  # the fourth within a minute: a crash loop
    assert still is False
    assert later is True
    assert budget.total == 4  # restarts granted, the refused ones not counted


def test_the_restart_count_round_trips_through_the_servers_directory(tmp_path: Path) -> None:
    """The parent's count is what every worker reads with its peers; a missing or garbled file reads as 0."""
    peers = Peers(tmp_path, worker="w1")
    assert read_restarts(tmp_path) == 0
    publish_restarts(tmp_path, 3)
    peers.peers()
    assert peers.restarts == 3
    (tmp_path / "restarts").write_text("not a number")
    assert read_restarts(tmp_path) == 0
