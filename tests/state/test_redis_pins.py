"""Conversations' pins shared through Redis: another process sends a conversation to the same member."""

from __future__ import annotations

import random

import pytest

from fakes import Fleet
from turnout import Client
from turnout.core.types import ChatRequest
from turnout.state.pins import Pin
from turnout.state.redis import RedisStore
from turnout.walk.affinity import conversation_key

pytestmark = pytest.mark.redis


async def test_a_pin_made_by_one_process_is_followed_by_another(redis_url: str) -> None:
    """A pins a conversation; B hears it and answers the same pin; a move by B reaches A; the key expires in Redis."""
    a, b = RedisStore(redis_url, prefix="aff1:"), RedisStore(redis_url, prefix="aff1:")
    try:
        await a.start()
        await b.start()
        now = a.clock()
        a.pin("p:conv", Pin("openai.east", 1), now=now, ttl=300.0)
        assert await b.wait_until(lambda: b.pinned("p:conv", b.clock()) is not None, 2.0)
        assert b.pinned("p:conv", b.clock()) == Pin("openai.east", 1)
        b.pin("p:conv", Pin("azure.west", 0), now=b.clock(), ttl=300.0)
        assert await a.wait_until(lambda: a.pinned("p:conv", a.clock()) == Pin("azure.west", 0), 2.0)
        ttl = await a._client().pttl("aff1:aff:p:conv")
        assert 0 < ttl <= 300_000
        assert a.pin_counts(a.clock()) == {"azure.west": 1}
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_turn_past_half_its_pins_life_shares_the_renewal(redis_url: str) -> None:
    """A turn reading a pin renews it; past half its life the renewal reaches the others, before it the mirror only."""
    a, b = RedisStore(redis_url, prefix="aff3:"), RedisStore(redis_url, prefix="aff3:")
    try:
        await a.start()
        await b.start()
        now = a.clock()
        a.pin("p:conv", Pin("openai.east", 0), now=now, ttl=10.0)
        assert await b.wait_until(lambda: b._pins.until("p:conv") == now + 10.0, 2.0)
        announced = set(a._announcing)
        assert a.pinned("p:conv", now + 2.0, 10.0) == Pin("openai.east", 0)  # 8 s left: the mirror only
        assert set(a._announcing) <= announced and a._pins.until("p:conv") == now + 12.0
        assert a.pinned("p:conv", now + 8.0, 10.0) == Pin("openai.east", 0)  # 4 s left: shared again
        assert await b.wait_until(lambda: b._pins.until("p:conv") == now + 18.0, 2.0)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_malformed_announcement_is_ignored(redis_url: str) -> None:
    """A pin message that does not parse (or has expired) changes nothing in the mirror."""
    store = RedisStore(redis_url, prefix="aff2:")
    try:
        store._apply("aff nonsense p:x")
        store._apply("aff 1,openai.a@1.0 p:y")  # its deadline is long past
        store._apply("aff x,openai.a@9999999999 p:z")
        assert store.pin_counts(store.clock()) == {}
    finally:
        await store.aclose()


POOL = """
default_provider = "trio"
[reliability]
provider_retries = 0
[state]
backend = "redis"
url = "{url}"
key_prefix = "aff3:"
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[providers.models.openai.c]
api_key = "sk-c"
model = "gpt-4.1"
[pools.trio]
members = ["openai.a", "openai.b", "openai.c"]
strategy = "weighted"
"""


def talk(topic: int, turn: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "s"}, {"role": "user", "content": f"topic {topic}"}] + [
        {"role": r, "content": f"{r} {i}"} for i in range(1, turn) for r in ("assistant", "user")
    ]


async def test_two_clients_sharing_redis_send_a_conversation_to_the_same_member(redis_url: str) -> None:
    """Client A serves turn 1 of 8 conversations; client B serves turns 2-4 of each on the member A pinned.

    Each client draws its own weighted order (B's draws differ from A's), so only the shared pins agree.
    """
    text = POOL.format(url=redis_url)
    first = random.Random(1)
    second = random.Random(2)
    async with (
        Client.from_toml(text, adapter_builder=Fleet(), ledger=False, chance=first.random) as a,
        Client.from_toml(text, adapter_builder=Fleet(), ledger=False, chance=second.random) as b,
    ):
        where = {n: (await a.chat(talk(n, 1))).served.provider for n in range(8)}
        assert len(set(where.values())) > 1  # spread by the strategy, not all on one member
        keys = {n: conversation_key(ChatRequest.of(talk(n, 1))) for n in range(8)}
        store = b.factory.store
        assert await store.wait_until(
            lambda: all(store.pinned(k, store.clock()) is not None for k in keys.values() if k is not None), 5.0
        )
        later = {n: [(await b.chat(talk(n, t))).served.provider for t in (2, 3, 4)] for n in range(8)}
    assert later == {n: [where[n]] * 3 for n in range(8)}
