"""Rate-limit headroom through real HTTP: the simulator's budgets count down, and the client cools a
used-up key or profile before it earns a 429 (the simulator enforces its budgets, so a late client would get one).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from it_support import client, config, profile, trail

from fakes import FakeClock
from turnout.core.secrets import key_id
from turnout.sim import Simulator
from turnout.state.redis import RedisStore

KEY_A, KEY_B = "sk-hr-key-a-0001", "sk-hr-key-b-0002"
A, B = key_id(KEY_A), key_id(KEY_B)


class SimClock:
    """The simulator's monotonic clock, moved by the test (its budgets refill on it)."""

    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def budget(model: str, requests: int, window: float = 50.0, **extra: Any) -> dict[str, Any]:
    """A script: ``model`` answers ok and has ``requests`` per ``window`` seconds per key (enforced)."""
    return {
        "attempts_per": "model_key",
        "models": {model: {"steps": ["ok"], "headroom": {"requests": requests, "window": window, **extra}}},
    }


def pool_and_backup(sim: Simulator, family: str = "openai") -> dict[str, Any]:
    """``<family>.main`` (model ``hr``, keys A and B) falling back to ``openai.backup`` (``gpt-4.1``)."""
    return config(
        {
            f"{family}.main": profile(sim, family, "hr", key=None, api_keys=[KEY_A, KEY_B], fallback=["openai.backup"]),
            "openai.backup": profile(sim, "openai", "gpt-4.1"),
        }
    )


async def spend(sim: Simulator, family: str, key: str, calls: int) -> None:
    """Spend ``calls`` of ``key``'s budget from another client (another process, as far as the pool knows)."""
    cfg = config({f"{family}.main": profile(sim, family, "hr", key=key)})
    async with client(cfg) as other:
        for _ in range(calls):
            await other.chat("hello there")


def served_keys(sim: Simulator, model: str) -> list[str | None]:
    """The key of each request the simulator saw for ``model``."""
    return [e.key_id for e in sim.log if e.model == model]


@pytest.mark.parametrize("family", ["openai", "anthropic"])
async def test_a_used_up_key_is_cooled_before_its_429_and_the_other_key_takes_over(family: str) -> None:
    """A's last request empties it: A cools down until the refill, B serves alone, then the fallback; no 429 ever."""
    sim_clock, clock = SimClock(), FakeClock()
    async with Simulator(budget("hr", 3), clock=sim_clock) as sim:
        await spend(sim, family, KEY_A, 2)  # A has one request left
        async with client(pool_and_backup(sim, family), env=clock.env) as c:
            replies = [await c.chat("hello there") for _ in range(4)]
            cooling = c.status()["cooldowns"]
            assert set(cooling) == {f"{family}.main#{A}", f"{family}.main#{B}"}
            fallback = await c.chat("hello there")
            if family == "openai":  # resets are durations from the client's clock: the refill is rehearsed exactly
                clock.now += 50
                sim_clock.now += 50
                again = await c.chat("hello there")
                assert [(a.provider, a.outcome, a.key_id) for a in again.attempts] == [(f"{family}.main", "ok", A)]
    assert [[(a.outcome, a.key_id) for a in r.attempts] for r in replies] == [
        [("ok", A)],  # A: nothing left now
        [("ok", B)],
        [("ok", B)],  # A's turn in the rotation, but A cools down
        [("ok", B)],  # B: nothing left now
    ]
    assert trail(fallback.attempts) == [
        (f"{family}.main", "hr", "cooldown_skip", None),
        ("openai.backup", "gpt-4.1", "ok", None),
    ]
    assert fallback.fallback is not None
    assert not [e for e in sim.log if e.outcome.startswith("status:")]
    assert served_keys(sim, "hr")[:6] == [A, A, A, B, B, B]


async def test_rotation_avoids_a_key_short_of_headroom_while_the_other_has_room() -> None:
    """A key announcing under a tenth of its budget is passed over while another key has more."""
    async with Simulator(budget("hr", 20)) as sim:
        await spend(sim, "openai", KEY_A, 18)  # A's next answer says 1 of 20 left
        async with client(pool_and_backup(sim)) as c:
            replies = [await c.chat("hello there") for _ in range(4)]
            rows = {row["key_id"]: row for row in c.status()["headroom"]}
    assert [r.attempts[0].key_id for r in replies] == [A, B, B, B]
    assert (rows[A]["requests"], rows[A]["request_limit"], rows[A]["low"]) == (1, 20, True)
    assert (rows[B]["requests"], rows[B]["low"]) == (17, False)
    assert not [e for e in sim.log if e.outcome.startswith("status:")]


@pytest.mark.parametrize("family", ["openai", "anthropic"])
async def test_a_stream_that_empties_a_single_key_profile_cools_the_profile(family: str) -> None:
    """Headroom is read when a stream opens: the next call skips the used-up profile instead of earning a 429."""
    async with Simulator(budget("hr", 1)) as sim:
        cfg = config(
            {
                f"{family}.main": profile(sim, family, "hr", fallback=["openai.backup"]),
                "openai.backup": profile(sim, "openai", "gpt-4.1"),
            }
        )
        async with client(cfg) as c:
            stream = c.stream("hello there")
            text = "".join([event.text async for event in stream if event.type == "text"])
            assert text and stream.response.attempts[0].outcome == "ok"
            assert set(c.status()["cooldowns"]) == {f"{family}.main"}
            after = await c.chat("hello there")
    assert [a.outcome for a in after.attempts] == ["cooldown_skip", "ok"]
    assert [(e.model, e.outcome) for e in sim.log] == [("hr", "ok"), ("gpt-4.1", "ok")]


async def test_status_shows_the_last_headroom_per_profile_and_key() -> None:
    """``Client.status()`` lists what each key last announced, with the resets as seconds from now."""
    async with Simulator(budget("hr", 5, tokens=1000)) as sim:
        cfg = config({"openai.main": profile(sim, "openai", "hr", key=KEY_A)})
        async with client(cfg) as c:
            assert c.status()["headroom"] == []
            await c.chat("hello there")
            (row,) = c.status()["headroom"]
    assert (row["profile"], row["key_id"], row["low"]) == ("openai.main", A, False)
    assert (row["requests"], row["request_limit"], row["token_limit"]) == (4, 5, 1000)
    assert 0 < row["tokens"] < 1000 and 49 < row["requests_reset_in"] <= 50


@pytest.mark.redis
async def test_a_used_up_profile_is_skipped_by_every_process_sharing_redis(redis_url: str) -> None:
    """A headroom cooldown lives in the shared store: another client skips the profile without a 429 of its own."""
    async with Simulator(budget("hr", 1)) as sim:
        cfg = config(
            {
                "openai.main": profile(sim, "openai", "hr", fallback=["openai.backup"]),
                "openai.backup": profile(sim, "openai", "gpt-4.1"),
            },
            state={"backend": "redis", "url": redis_url, "key_prefix": "hr:"},
        )
        async with client(cfg) as one, client(cfg) as two:
            first = await one.chat("hello there")
            store = two.factory.store
            assert isinstance(store, RedisStore)
            assert await store.wait_until(lambda: store.cooldown_until("openai.main", time.time()) is not None, 5)
            second = await two.chat("hello there")
    assert [a.outcome for a in first.attempts] == ["ok"]
    assert [(a.provider, a.outcome) for a in second.attempts] == [
        ("openai.main", "cooldown_skip"),
        ("openai.backup", "ok"),
    ]
    assert [(e.model, e.outcome) for e in sim.log] == [("hr", "ok"), ("gpt-4.1", "ok")]
