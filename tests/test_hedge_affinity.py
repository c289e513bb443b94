"""Hedging respects affinity: a pinned member answering within its normal latency is not raced on another member."""

from __future__ import annotations

import pytest

from fakes import FakeClock, Scripted
from test_hedge import Slow, SlowStream
from turnout import Client
from turnout.walk.hedge import HedgeSettings, normal_latency
from turnout.walk.stats import EntryStats

POOL = """
default_provider = "duo"
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[pools.duo]
members = ["openai.a", "openai.b"]
strategy = "ordered"
[reliability]
provider_retries = 0
[reliability.hedge]
enabled = true
after_ms = 20
budget = 1.0
burst = 100
"""
NORMAL_S = 0.5  # openai.a's ordinary time to first token in these tests


def test_a_pinned_member_is_not_hedged_before_its_normal_latency() -> None:
    """The delay of a pinned call is at least median + 3 MADs; an unpinned call keeps after_ms; auto is unchanged."""
    stats = EntryStats()
    for i in range(40):
        stats.first_token(0.2 + 0.01 * (i % 5))  # median 0.22, MAD 0.01
    fixed = HedgeSettings(enabled=True, after_ms=20)
    assert normal_latency(stats) == pytest.approx(0.25)
    assert fixed.delay(stats) == pytest.approx(0.02)
    assert fixed.delay(stats, pinned=True) == pytest.approx(0.25)
    assert HedgeSettings(enabled=True, after_ms=400).delay(stats, pinned=True) == pytest.approx(0.4)  # longer: kept
    assert fixed.delay(EntryStats(), pinned=True) == pytest.approx(0.02)  # too few answers to know what is normal
    auto = HedgeSettings(enabled=True, after_ms="auto")
    assert auto.delay(stats, pinned=True) == auto.delay(stats) == pytest.approx(0.44)


def pinned_client(first: Scripted, other: Scripted) -> Client:
    """The pool duo (a first for a new conversation), hedging after 20 ms; a has answered in 500 ms 30 times."""
    fleet = {"openai.a": first, "openai.b": other}
    clock = FakeClock()
    client = Client.from_toml(POOL, adapter_builder=lambda name, *_: fleet[name], ledger=False, env=clock.env)
    stats = client.factory.stats
    assert stats is not None
    for _ in range(30):
        stats.of("openai.a/gpt-4.1").first_token(NORMAL_S)
    return client


def turn(n: int, topic: str = "trip") -> list[dict[str, str]]:
    out = [{"role": "system", "content": "s"}, {"role": "user", "content": f"plan a {topic}"}]
    for i in range(1, n):
        out += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"u{i}"}]
    return out


async def test_a_pinned_member_within_its_normal_latency_gets_no_hedge_and_a_far_slower_one_does() -> None:
    """Turn 1 pins a; turn 2 takes 100 ms (after_ms is 20, a's normal 500): no hedge, a serves.

    Turn 3 takes far longer than a's normal: b is raced in and wins (the conversation moves). A new conversation
    answered in 100 ms by a is hedged at after_ms as before: the rule is for pinned calls only.
    """
    a, b = Slow("from a", delay=0.0), Slow("from b", delay=0.0)
    async with pinned_client(a, b) as client:
        assert (await client.chat(turn(1))).served.provider == "openai.a"
        a.delay = 0.1
        second = await client.chat(turn(2))
        assert second.served.provider == "openai.a" and b.calls == []
        assert [x.outcome for x in second.attempts] == ["ok"]
        a.delay = 5.0
        third = await client.chat(turn(3))
        assert third.served.provider == "openai.b"
        assert sorted(x.outcome for x in third.attempts) == ["hedge_lost", "ok"]
        a.delay = 0.0
        assert (await client.chat(turn(4))).served.provider == "openai.b"  # the hedge that won is the new pin
        a.delay = 0.1
        fresh = await client.chat(turn(1, "party"))
        assert fresh.served.provider == "openai.b"  # not pinned: hedged after 20 ms, and b answers at once
        assert client.status()["hedging"]["hedged"] == 2


async def test_a_pinned_stream_within_its_normal_latency_gets_no_hedge() -> None:
    """The same rule for a stream: a's first output after 100 ms is relayed, b is never opened."""
    a, b = SlowStream("from a", delay=0.0), SlowStream("from b", delay=0.0)
    async with pinned_client(a, b) as client:
        first = client.stream(turn(1))
        async for _ in first:
            pass
        assert first.response.served.provider == "openai.a"
        a.delay = 0.1
        second = client.stream(turn(2))
        text = "".join([e.text async for e in second if e.type == "text"])
        assert text == "from a" and b.stream_calls == []
