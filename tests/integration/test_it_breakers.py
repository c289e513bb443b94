"""Circuit breakers through real HTTP: an outage on the primary, learned and forgotten (Client → simulator).

The simulator and the client share one fake clock, so the outage (the simulator's ``flapping`` step), the
breaker's open intervals and the pace of the calls are exact and cost no waiting; only a silent primary's
first-token timeout (0.2 s) is real time. A call is made every second of the fake clock; the simulator's log says
which calls reached the primary.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from it_support import FAMILIES, config, profile

from fakes import FakeClock
from turnout import Client, Environment
from turnout.sim import Simulator
from turnout.state.redis import RedisStore

PRIMARY, BACKUP = "primary-model", "backup-model"
OUTAGE_S = 30.0
#: The call the primary's breaker is open after, at the latest, and the probes the rules give (open 5 s, doubling):
#: the third call failing on it opens it, a 503 outage (three tries a call) as a silent one (a timeout moves on at
#: once): a call's retries are one signal.
OPENED_BY = {"status": 3, "silence": 3}
PROBES = {"status": [7.0, 17.0, 37.0], "silence": [7.0, 17.0, 37.0]}


async def instant(seconds: float) -> None:
    """Backoff sleeps take no time (the test moves the clock itself)."""
    await asyncio.sleep(0)


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the run: when it was made, what it did, who served it, and how often it reached the primary."""

    at: float
    outcomes: list[str]
    served: str
    hits: int


def outage_script(mode: str) -> dict[str, Any]:
    """The primary is down (503, or silent) for 30 s from the start of the run; the backup is healthy."""
    return {"models": {PRIMARY: {"steps": [{"do": "flapping", "down": OUTAGE_S, "mode": mode}]}}}


def outage_config(sim: Simulator, family: str) -> dict[str, Any]:
    """``<family>.main`` (the primary, short first-token timeout) falling back to ``<family>.backup``."""
    return config(
        {
            f"{family}.main": profile(
                sim, family, PRIMARY, fallback=[f"{family}.backup"], first_token_timeout_secs=0.2
            ),
            f"{family}.backup": profile(sim, family, BACKUP),
        },
        backoff_ms=0,
    )


def primary_hits(sim: Simulator) -> int:
    return sum(1 for e in sim.log if e.model == PRIMARY)


async def through_outage(
    sim: Simulator, clock: FakeClock, call: Callable[[], Awaitable[tuple[list[str], str]]], until: float = 45.0
) -> list[Call]:
    """A call every second of the fake clock, from the outage's start to ``until`` seconds later."""
    start, calls = clock.now, []
    while clock.now - start <= until:
        before = primary_hits(sim)
        outcomes, served = await call()
        calls.append(Call(clock.now - start, outcomes, served, primary_hits(sim) - before))
        clock.now += 1.0
    return calls


def check_the_breaker(calls: list[Call], mode: str, main: str) -> None:
    """What the breaker promises: opened by call 3, then one probe per open interval, then back within one."""
    opened = OPENED_BY[mode]
    assert all(c.hits >= 1 for c in calls[:opened])
    back = next(c for c in calls if c.served == main)
    assert back.at == PROBES[mode][-1]  # the first probe after the outage closes it ...
    assert back.at - OUTAGE_S <= 20.0  # ... within the open interval in force when the outage ended
    during = [c for c in calls[opened:] if c.at <= back.at]
    assert [c.at for c in during if c.hits] == PROBES[mode]  # one probe per open interval (5, 10, 20 s)
    assert all(c.hits <= 1 for c in during)
    assert all(c.outcomes[0] == "breaker_skip" for c in during if not c.hits)
    assert all(c.served == main and c.hits == 1 for c in calls if c.at >= back.at)


@pytest.mark.parametrize("family", FAMILIES)
async def test_a_503_outage_is_skipped_probed_and_forgotten(family: str) -> None:
    """A primary answering 503 for 30 s costs three tries in three calls; then calls skip it, probe it, return to it."""
    clock = FakeClock()
    async with Simulator(clock=clock, sleep=instant) as sim:
        sim.set_script(outage_script("status"))
        async with Client.from_dict(
            outage_config(sim, family), ledger=False, env=Environment(clock=clock, sleep=instant)
        ) as c:

            async def chat() -> tuple[list[str], str]:
                reply = await c.chat("hello there")
                return [a.outcome for a in reply.attempts], reply.served.provider

            calls = await through_outage(sim, clock, chat)
    assert [c.outcomes for c in calls[:3]] == [["retryable"] * 3 + ["ok"]] * 3
    assert calls[3].outcomes == ["breaker_skip", "ok"] and calls[3].served == f"{family}.backup"
    check_the_breaker(calls, "status", f"{family}.main")


@pytest.mark.parametrize(
    ("family", "mode"),
    [("openai", "status"), ("gemini", "status"), pytest.param("anthropic", "silence", marks=pytest.mark.slow)],
)
async def test_streams_skip_an_open_primary_and_come_back_to_it(family: str, mode: str) -> None:
    """Streamed turns learn the outage as calls do: a failed opening recovers on the backup, then skips and probes."""
    clock = FakeClock()
    async with Simulator(clock=clock, sleep=instant) as sim:
        sim.set_script(outage_script(mode))
        async with Client.from_dict(
            outage_config(sim, family), ledger=False, env=Environment(clock=clock, sleep=instant)
        ) as c:

            async def stream() -> tuple[list[str], str]:
                s = c.stream("hello there")
                text = "".join([e.text async for e in s if e.type == "text"])
                assert text == "Hello from the Turnout simulator."
                return [a.outcome for a in s.response.attempts], s.response.served.provider

            calls = await through_outage(sim, clock, stream)
    check_the_breaker(calls, mode, f"{family}.main")
    assert all(e.stream for e in sim.log if e.model == PRIMARY)


@pytest.mark.slow
async def test_a_silent_outage_costs_one_timeout_per_call_until_the_breaker_opens() -> None:
    """A primary that accepts and never answers: three calls wait for its first-token timeout, then none does."""
    clock = FakeClock()
    async with Simulator(clock=clock, sleep=instant) as sim:
        sim.set_script(outage_script("silence"))
        async with Client.from_dict(
            outage_config(sim, "openai"), ledger=False, env=Environment(clock=clock, sleep=instant)
        ) as c:

            async def chat() -> tuple[list[str], str]:
                reply = await c.chat("hello there")
                return [a.outcome for a in reply.attempts], reply.served.provider

            calls = await through_outage(sim, clock, chat)
        outcomes = [e.outcome for e in await sim.wait_for_log(len(sim.log)) if e.model == PRIMARY]
    assert [c.outcomes for c in calls[:4]] == [["timeout", "ok"]] * 3 + [["breaker_skip", "ok"]]
    check_the_breaker(calls, "silence", "openai.main")
    assert outcomes == ["client_disconnected"] * 5 + ["ok"] * (len(outcomes) - 5)


@pytest.mark.redis
async def test_two_clients_sharing_redis_agree_on_an_open_breaker_and_send_one_probe(redis_url: str) -> None:
    """One client's outage (three failed calls) opens the breaker for both; when due, they race, one probe is sent."""
    prefix = f"itbr-{uuid.uuid4().hex[:8]}:"
    ahead = [0.0]  # both clients' wall clock, moved past the open interval instead of waiting for it

    def clock() -> float:
        return time.time() + ahead[0]

    async with Simulator() as sim:
        cfg = config(
            {
                "openai.main": profile(sim, "openai", "sim-503", fallback=["openai.backup"]),
                "openai.backup": profile(sim, "openai", BACKUP),
            },
            backoff_ms=0,
            state={"backend": "redis", "url": redis_url, "key_prefix": prefix},
        )
        options: dict[str, Any] = {"ledger": False, "env": Environment(clock=clock, sleep=instant)}
        async with Client.from_dict(cfg, **options) as one, Client.from_dict(cfg, **options) as two:
            for _ in range(3):
                first = await one.chat("hello")
                assert [a.outcome for a in first.attempts] == ["retryable"] * 3 + ["ok"]
            shared = two.factory.store
            assert isinstance(shared, RedisStore)
            assert await shared.wait_until(lambda: shared.breaker("openai.main/sim-503") is not None, within=5)
            skipped = await two.chat("hello")
            assert [a.outcome for a in skipped.attempts] == ["breaker_skip", "ok"]
            ahead[0] = 5.0  # the open interval is over: the breaker is half-open for both
            raced = await asyncio.gather(one.chat("hello"), two.chat("hello"))
        log = await sim.wait_for_log(len(sim.log))
    assert sorted((r.attempts[0].outcome, r.attempts[0].detail) for r in raced) == [
        ("breaker_skip", "probe_taken"),
        ("retryable", "http_503"),
    ]
    assert [e.model for e in log].count("sim-503") == 9 + 1
