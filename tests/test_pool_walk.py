"""Pools through the client (fake adapters, fake clock): member order, failover, fallbacks, breakers, notices."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from fakes import FakeClock, Fleet, err
from turnout import Client
from turnout.core.errors import AllProvidersFailed
from turnout.core.types import TextDelta

PROFILES = """
[reliability]
provider_retries = 0
affinity = { enabled = false }
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
fallback_models = ["gpt-4.1-mini"]
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[providers.models.anthropic.c]
api_key = "sk-c"
model = "claude-haiku-4-5"
"""


def pool_config(strategy: str = "ordered", extra: str = "") -> str:
    return (
        'default_provider = "duo"\n'
        + PROFILES
        + f'[pools.duo]\nmembers = ["openai.a", "openai.b"]\nstrategy = "{strategy}"\nfallback = ["anthropic.c"]\n'
        + extra
    )


class Chance:
    """The given numbers in turn (the last repeats)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


def make(text: str, fleet: Fleet, **options: Any) -> tuple[Client, FakeClock]:
    clock = FakeClock()
    options.setdefault("chance", Chance(0.5))
    client = Client.from_toml(text, adapter_builder=fleet, env=clock.env, ledger=False, **options)
    return client, clock


def trail(attempts: Any) -> list[tuple[str, str, str]]:
    return [(a.provider, a.model, a.outcome) for a in attempts]


async def test_an_answer_from_any_member_is_no_fallback() -> None:
    """The pool picks b first (weighted draw): b serves, requested stays the pool's first member, no notice."""
    fleet = Fleet()
    client, _ = make(pool_config("weighted"), fleet, chance=Chance(0.1, 0.9))
    reply = await client.chat("hi")
    assert trail(reply.attempts) == [("openai.b", "gpt-4.1", "ok")]
    assert reply.requested.provider == "openai.a"
    assert reply.notice is None and reply.fallback is None
    assert fleet.calls("openai.a") == []


async def test_members_fail_over_to_each_other_without_a_notice() -> None:
    """A member that fails hands the call to the next member; its answer is still no fallback."""
    fleet = Fleet(openai__a=[err(500)])
    client, _ = make(pool_config(), fleet)
    reply = await client.chat("hi")
    assert trail(reply.attempts) == [("openai.a", "gpt-4.1", "retryable"), ("openai.b", "gpt-4.1", "ok")]
    assert reply.fallback is None


async def test_a_members_lesser_model_comes_after_every_members_primary_and_is_a_fallback() -> None:
    """Tiers: a's gpt-4.1-mini is tried only after b's gpt-4.1; an answer from it carries a notice."""
    fleet = Fleet(openai__a=[err(500), "ok from mini"], openai__b=[err(500)])
    client, _ = make(pool_config(), fleet)
    reply = await client.chat("hi")
    assert trail(reply.attempts) == [
        ("openai.a", "gpt-4.1", "retryable"),
        ("openai.b", "gpt-4.1", "retryable"),
        ("openai.a", "gpt-4.1-mini", "ok"),
    ]
    assert reply.fallback is not None and reply.fallback.served.model == "gpt-4.1-mini"


async def test_when_every_member_fails_the_pools_fallback_serves_with_a_notice() -> None:
    """All members down: the pool's own fallback answers, announced as a fallback from the pool."""
    fleet = Fleet(openai__a=[err(503)], openai__b=[err(503)])
    client, _ = make(pool_config(), fleet)
    reply = await client.chat("hi")
    assert [p for p, _, _ in trail(reply.attempts)] == ["openai.a", "openai.b", "openai.a", "anthropic.c"]
    assert reply.served.provider == "anthropic.c"
    assert reply.fallback is not None and reply.fallback.cross_family
    assert "(openai.a) was unavailable" in reply.fallback.text


async def test_every_entry_failing_raises_with_every_attempt() -> None:
    """Members and fallbacks all failing: AllProvidersFailed with each attempt, in the order tried."""
    fleet = Fleet(openai__a=[err(500)], openai__b=[err(500)], anthropic__c=[err(500)])
    client, _ = make(pool_config(), fleet)
    with pytest.raises(AllProvidersFailed) as info:
        await client.chat("hi")
    assert [a.provider for a in info.value.attempts] == ["openai.a", "openai.b", "openai.a", "anthropic.c"]


async def test_a_member_in_an_outage_is_skipped_by_its_own_breaker() -> None:
    """Three failures open a's breaker (per member): later calls skip it at no cost and b serves."""
    fleet = Fleet(openai__a=[err(503)])
    client, _ = make(pool_config(), fleet)
    for _ in range(3):
        assert (await client.chat("hi")).served.provider == "openai.b"
    calls = len(fleet.calls("openai.a"))
    reply = await client.chat("hi")
    assert trail(reply.attempts)[0] == ("openai.a", "gpt-4.1", "breaker_skip")
    assert reply.served.provider == "openai.b" and reply.fallback is None
    assert len(fleet.calls("openai.a")) == calls


async def test_a_rate_limited_member_cools_down_alone() -> None:
    """A 429 cools member a down (all its models); b keeps serving, and a's cooldown does not touch b."""
    fleet = Fleet(openai__a=[err(429, headers={"retry-after": "20"})])
    client, clock = make(pool_config(), fleet)
    first = await client.chat("hi")
    assert trail(first.attempts)[0][2] == "rate_limited"
    second = await client.chat("hi")
    assert [(p, o) for p, _, o in trail(second.attempts)] == [("openai.a", "cooldown_skip"), ("openai.b", "ok")]
    clock.now += 21
    fleet.built[("openai.a", "sk-a")].steps = ["ok again"]
    assert (await client.chat("hi")).served.provider == "openai.a"


async def test_latency_pool_sends_the_call_to_the_faster_member() -> None:
    """With b's moving TTFT below a's, a latency pool tries b first (no exploration drawn)."""
    fleet = Fleet()
    client, _ = make(pool_config("latency"), fleet, chance=Chance(0.99))
    stats = client.factory.stats
    assert stats is not None
    stats.of("openai.a/gpt-4.1").first_token(0.3)
    stats.of("openai.b/gpt-4.1").first_token(0.05)
    for key in ("openai.a/gpt-4.1", "openai.b/gpt-4.1"):
        stats.of(key).calls = 1
    assert (await client.chat("hi")).served.provider == "openai.b"


async def test_least_busy_sends_a_concurrent_call_to_the_idle_member() -> None:
    """While a stream holds member a, a least_busy pool sends the next call to b."""
    fleet = Fleet()
    client, _ = make(pool_config("least_busy"), fleet, chance=Chance(0.1, 0.9))
    stream = client.stream("hi")
    async with stream:
        events = stream.__aiter__()
        first = await events.__anext__()
        assert isinstance(first, TextDelta) and stream.served is not None
        assert stream.served.provider == "openai.a"
        other = await client.chat("hi")
        assert other.served.provider == "openai.b"
        async for _ in events:
            pass
    stats = client.factory.stats
    assert stats is not None and stats.of("openai.a/gpt-4.1").in_flight == 0


async def test_a_stream_failing_before_output_recovers_on_the_other_member_without_a_notice() -> None:
    """Streaming: a's stream fails before its first event; the recovery goes to b, a peer: no notice."""
    fleet = Fleet(openai__a=[err(500)])
    client, _ = make(pool_config(), fleet)
    stream = client.stream("hi")
    text = "".join([e.text async for e in stream if isinstance(e, TextDelta)])
    assert text == "ok from openai.b"
    reply = stream.response
    assert reply.served.provider == "openai.b" and reply.fallback is None
    assert [(a.provider, a.outcome) for a in reply.attempts][-1] == ("openai.b", "ok")


async def test_a_streamed_pool_fallback_is_announced_while_the_events_flow() -> None:
    """Both members failing before output: the fallback's stream carries the notice (the gateway's header)."""
    fleet = Fleet(openai__a=[err(500)], openai__b=[err(500)])
    client, _ = make(pool_config(), fleet)
    stream = client.stream("hi")
    seen = None
    async for event in stream:
        if isinstance(event, TextDelta) and seen is None:
            seen = stream.fallback
    assert stream.response.served.provider == "anthropic.c"
    assert seen is not None and seen.served.provider == "anthropic.c"


async def test_a_pool_can_be_chosen_per_call_and_reached_through_a_hint() -> None:
    """provider="duo" and a hint whose target is the pool both arrange its members."""
    text = (
        'default_provider = "anthropic.c"\n'
        + PROFILES
        + '[pools.duo]\nmembers = ["openai.a", "openai.b"]\nstrategy = "weighted"\n'
        + '[[model_routes]]\nhint = "gpt"\nmodel_provider = "duo"\nmodel = "gpt-4.1"\n'
    )
    fleet = Fleet()
    client, _ = make(text, fleet, chance=Chance(0.1, 0.9, 0.1, 0.9))
    assert (await client.chat("hi", provider="duo")).served.provider == "openai.b"
    reply = await client.chat("hi", model="hint:gpt")
    assert reply.served.provider == "openai.b" and reply.fallback is None
    assert (await client.chat("hi")).served.provider == "anthropic.c"


async def test_concurrent_calls_spread_over_a_weighted_pool() -> None:
    """Seeded draws: 200 calls over equal weights land on both members, roughly evenly."""
    fleet = Fleet()
    client, _ = make(pool_config("weighted"), fleet, chance=random.Random(2).random)
    replies = await asyncio.gather(*(client.chat("hi") for _ in range(200)))
    served = [r.served.provider for r in replies]
    assert 70 <= served.count("openai.a") <= 130
    status = client.status()["pools"][0]
    assert [m["calls"] for m in status["members"]] == [served.count("openai.a"), served.count("openai.b")]


def test_without_pools_no_stats_are_kept_and_the_walk_order_is_precomputed() -> None:
    """No pool configured: the factory keeps no stats and each walk visits entries in a tuple made once."""
    client = Client.from_toml('default_provider = "openai.a"\n' + PROFILES, adapter_builder=Fleet(), ledger=False)
    walk = client.router.default
    assert client.factory.stats is None and walk.context.stats is None
    assert walk.visit_order() is walk.visit_order()
    assert tuple(walk.visit_order()) == tuple(range(len(walk.entries)))
    assert client.status()["pools"] == []


async def test_a_callers_model_is_sent_to_every_member_of_the_active_pool() -> None:
    """A plain model on a pool's call replaces each member's primary model, as it does a profile's."""
    fleet = Fleet(openai__a=[err(500)])
    client, _ = make(pool_config(), fleet)
    reply = await client.chat("hi", model="gpt-4.1-nano")
    assert trail(reply.attempts) == [("openai.a", "gpt-4.1-nano", "retryable"), ("openai.b", "gpt-4.1-nano", "ok")]
    assert reply.fallback is None
