"""Prompt-cache affinity: conversation keys, the bounded pin table, pinned pool order, re-pinning, sharing."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from multidict import CIMultiDict

from fakes import Alternate, FakeClock, Fleet, err
from turnout import Client
from turnout.core.errors import ConfigError, InvalidRequest
from turnout.core.types import ChatRequest, Message
from turnout.gateway.anthropic_surface import AnthropicSurface
from turnout.gateway.openai_surface import OpenAISurface
from turnout.gateway.responses_surface import ResponsesSurface
from turnout.gateway.surface import ChatCall
from turnout.state import MemoryStore
from turnout.state.pins import Pin, PinTable
from turnout.walk.affinity import MAX_NAME_CHARS, SESSION_HEADERS, Affinity, conversation_key, session_of
from turnout.walk.keys import KeyPool
from turnout.walk.pools import Pool

SYSTEM = "You are a terse assistant."
TOOL_A = {"name": "alpha", "description": "a", "schema": {"type": "object", "properties": {}}}
TOOL_B = {"name": "beta", "description": "b", "schema": {"type": "object", "properties": {"x": {"type": "string"}}}}


def of(call: ChatCall) -> ChatRequest:
    return ChatRequest(messages=call.messages, tools=call.tools, native=call.native)


def openai_chat(*tools: dict[str, Any], **extra: Any) -> ChatRequest:
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Plan a trip."}],
        "tools": [
            {
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": t["schema"]},
            }
            for t in tools
        ],
        **extra,
    }
    if not tools:
        del body["tools"]
    return of(OpenAISurface().parse(json.dumps(body).encode()))


def anthropic(*tools: dict[str, Any]) -> ChatRequest:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Plan a trip."}]}],
    }
    if tools:
        body["tools"] = [
            {"name": t["name"], "description": t["description"], "input_schema": t["schema"]} for t in tools
        ]
    return of(AnthropicSurface().parse(json.dumps(body).encode()))


def responses(*tools: dict[str, Any]) -> ChatRequest:
    body: dict[str, Any] = {"model": "m", "instructions": SYSTEM, "input": "Plan a trip."}
    if tools:
        body["tools"] = [
            {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["schema"]}
            for t in tools
        ]
    return of(ResponsesSurface().parse(json.dumps(body).encode()))


def test_the_prefix_key_is_the_same_in_every_wire_format() -> None:
    """One conversation sent as OpenAI Chat, Responses and Anthropic Messages gets one key, tools included."""
    keys = {conversation_key(f(TOOL_A, TOOL_B)) for f in (openai_chat, anthropic, responses)}
    assert len(keys) == 1 and None not in keys


def test_the_prefix_key_ignores_tool_order_but_not_tools() -> None:
    """Tools in another order hash the same; another tool set, another system prompt or first message does not."""
    assert conversation_key(openai_chat(TOOL_A, TOOL_B)) == conversation_key(openai_chat(TOOL_B, TOOL_A))
    assert conversation_key(openai_chat(TOOL_A)) != conversation_key(openai_chat(TOOL_A, TOOL_B))
    base = ChatRequest.of([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert conversation_key(base) != conversation_key(ChatRequest.of([{"role": "user", "content": "u"}]))
    assert conversation_key(base) != conversation_key(
        ChatRequest.of([{"role": "system", "content": "s"}, {"role": "user", "content": "v"}])
    )


def test_later_turns_of_a_conversation_keep_its_key() -> None:
    """Turn 3 (the first exchange plus more) keys like turn 1: only the stable prefix is hashed."""
    first = ChatRequest.of([{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}])
    later = ChatRequest.of(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
        ]
    )
    assert conversation_key(first) == conversation_key(later)


def test_a_clients_own_conversation_name_wins_over_the_prefix() -> None:
    """prompt_cache_key, user and metadata.user_id name the conversation; distinct names give distinct keys."""
    plain = conversation_key(openai_chat())
    by_cache = conversation_key(openai_chat(prompt_cache_key="conv-1"))
    by_user = conversation_key(openai_chat(user="conv-1"))
    other = conversation_key(openai_chat(prompt_cache_key="conv-2"))
    assert len({plain, by_cache, by_user, other}) == 4
    assert (
        conversation_key(openai_chat(prompt_cache_key="conv-1", messages=[{"role": "user", "content": "x"}]))
        == by_cache
    )
    meta = ChatRequest(messages=(Message(role="user", content="hi"),), native=None)
    assert conversation_key(meta, "session-7") == conversation_key(ChatRequest.of("other"), "session-7")
    assert all(k is not None and len(k) < 40 and "conv" not in k for k in (by_cache, by_user))  # a digest, no text


def test_the_pin_table_is_bounded_and_expires() -> None:
    """Beyond its limit the least recently used pin goes; a pin dies at its deadline; counts follow both."""
    table = PinTable(limit=2)
    table.put("a", Pin("m1"), until=100.0, now=0.0)
    table.put("b", Pin("m2"), until=100.0, now=0.0)
    table.put("a", Pin("m1"), until=110.0, now=10.0)  # used again: b is now the oldest
    table.put("c", Pin("m1"), until=120.0, now=20.0)
    assert table.get("b", 20.0) is None and table.get("a", 20.0) == Pin("m1")
    assert table.counts(20.0) == {"m1": 2}
    assert table.get("a", 110.0) is None
    assert table.counts(115.0) == {"m1": 1}


def test_a_pin_renewed_as_it_was_lives_longer_and_becomes_the_most_recent() -> None:
    """The same pin put again (a turn on its member): a later deadline, last in LRU order, counts unchanged."""
    table = PinTable(limit=2)
    pin = Pin("m1")
    table.put("a", pin, until=100.0, now=0.0)
    table.put("b", Pin("m2"), until=100.0, now=0.0)
    assert table.put("a", pin, until=150.0, now=50.0) is pin
    assert table.until("a") == 150.0 and table.counts(50.0) == {"m1": 1, "m2": 1}
    table.put("c", Pin("m3"), until=160.0, now=60.0)  # over the limit: b, not a, is the oldest
    assert table.get("b", 60.0) is None and table.get("a", 120.0) is pin
    assert table.put("a", pin, until=300.0, now=200.0) is None  # expired: a new pin, counted again
    assert table.counts(200.0) == {"m1": 1}


def test_the_store_limit_and_ttl_come_from_the_affinity() -> None:
    """Affinity(ttl, max_conversations) bounds the store's pins; a fake clock past the ttl forgets them."""
    clock = FakeClock()
    store = MemoryStore()
    affinity = Affinity(store, ttl=60.0, max_conversations=1, clock=clock)
    affinity.served("k1", "openai.a", 0)
    affinity.served("k2", "openai.b", 1)
    assert affinity.pinned("k1") is None and affinity.pinned("k2") == Pin("openai.b", 1)
    clock.now += 60.0
    assert affinity.pinned("k2") is None


def test_a_turn_renews_its_pin_and_a_turn_served_where_it_was_pinned_writes_nothing() -> None:
    """A pin lives ttl after the last turn that read it; served by its pin, the turn pins nothing again."""
    clock = FakeClock()
    store = MemoryStore()
    affinity = Affinity(store, ttl=60.0, clock=clock)
    affinity.served("k", "openai.a", 1)
    clock.now += 50.0
    pin = affinity.pin_for("k")  # a turn begins 50 s on: the pin lives until 110 s from the start
    assert pin == Pin("openai.a", 1)
    writes: list[str] = []
    original = store.pin

    def pin_and_count(key: str, pin: Pin, *, now: float, ttl: float) -> None:
        writes.append(key)
        original(key, pin, now=now, ttl=ttl)

    store.pin = pin_and_count  # type: ignore[method-assign]
    affinity.served("k", "openai.a", 1, pin)
    assert writes == []
    clock.now += 50.0  # 100 s: past the first ttl, within the renewed one
    assert affinity.pinned("k") == Pin("openai.a", 1)
    affinity.served("k", "openai.b", 0, pin)  # the turn went elsewhere: pinned there
    assert writes == ["k"] and affinity.pinned("k") == Pin("openai.b", 0)
    clock.now += 60.0
    assert affinity.pinned("k") is None and affinity.pin_for("k") is None


def test_new_conversations_keep_off_a_member_beyond_its_share() -> None:
    """With 2 of 3 live conversations on a, a new one goes to b first though the strategy put a first."""
    store = MemoryStore()
    affinity = Affinity(store, clock=lambda: 0.0)
    for key, member in (("k1", "a"), ("k2", "a"), ("k3", "b")):
        affinity.served(key, member, 0)
    ordered = Pool("p", "ordered", keys={})
    assert list(affinity.arrange(["a", "b", "c"], None, lambda m: True, ordered, None)) == ["b", "c", "a"]
    assert list(affinity.arrange(["a", "b", "c"], Pin("a"), lambda m: True, ordered, None)) == ["a", "b", "c"]
    assert list(affinity.arrange(["b", "a", "c"], Pin("a"), lambda m: m != "a", ordered, None)) == ["b", "c", "a"]


def test_a_pinned_member_goes_first_and_the_strategy_orders_only_the_others() -> None:
    """The weighted strategy draws once per other member: the pinned one takes no draw and the rest keep theirs."""
    draws = iter([0.2, 0.9])
    pool = Pool("p", "weighted", keys={}, chance=lambda: next(draws))
    affinity = Affinity(MemoryStore(), clock=lambda: 0.0)
    assert list(affinity.arrange(["a", "b", "c"], Pin("b"), None, pool, None)) == ["b", "c", "a"]
    assert next(draws, None) is None  # two draws, both taken


def test_a_key_pool_picks_the_conversations_key_first() -> None:
    """A rotating key pool takes the preferred key while it is usable, else rotates as usual."""
    pool = KeyPool("openai.a", ["k-1", "k-2", "k-3"], MemoryStore(), clock=lambda: 0.0)
    assert [pool.pick(0.0, 2).index for _ in range(3)] == [2, 2, 2]  # type: ignore[union-attr]
    assert pool.pick(0.0).index == 0  # type: ignore[union-attr]


POOL = """
default_provider = "duo"
[reliability]
provider_retries = 0
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[pools.duo]
members = ["openai.a", "openai.b"]
strategy = "least_busy"
"""


def conversation(turn: int) -> list[dict[str, str]]:
    out = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"}]
    for i in range(1, turn):
        out += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"u{i}"}]
    return out


async def test_a_conversation_sticks_to_its_member_and_moves_once_when_it_fails() -> None:
    """Turns go where turn 1 went; when that member fails, the next member serves and keeps every later turn."""
    clock = FakeClock()
    fleet = Fleet()
    client = Client.from_toml(POOL, adapter_builder=fleet, env=clock.env, ledger=False, chance=Alternate())
    first = (await client.chat(conversation(1))).served.provider
    served = [(await client.chat(conversation(t))).served.provider for t in range(2, 5)]
    assert served == [first] * 3
    other = "openai.b" if first == "openai.a" else "openai.a"
    broken = next(p for (name, _), p in fleet.built.items() if name == first)
    broken.steps = [err(500)]
    moved = await client.chat(conversation(5))
    assert moved.served.provider == other
    broken.steps = ["ok again"]  # the old member recovers: the conversation stays where it moved
    later = [(await client.chat(conversation(t))).served.provider for t in range(6, 9)]
    assert later == [other] * 3


async def test_without_affinity_the_strategy_alone_orders_each_call() -> None:
    """Enabled = false: the same conversation follows least_busy's alternating ties (the old behaviour)."""
    clock = FakeClock()
    text = POOL.replace("provider_retries = 0\n", "provider_retries = 0\naffinity = { enabled = false }\n")
    client = Client.from_toml(text, adapter_builder=Fleet(), env=clock.env, ledger=False, chance=Alternate())
    served = {(await client.chat(conversation(t))).served.provider for t in range(1, 7)}
    assert served == {"openai.a", "openai.b"}


def test_a_bad_affinity_setting_names_its_key_path() -> None:
    """ttl_secs = 0 is refused with the key's path."""
    text = POOL.replace("provider_retries = 0\n", "provider_retries = 0\naffinity = { ttl_secs = 0 }\n")
    with pytest.raises(ConfigError, match=r"reliability\.affinity\.ttl_secs"):
        Client.from_toml(text, adapter_builder=Fleet(), ledger=False)


def test_the_callers_cache_key_names_the_conversation_and_is_hashed() -> None:
    """cache_key wins over the body's names and the prefix; distinct keys differ; the key holds no client text."""
    named = ChatRequest.of("Plan a trip.", cache_key="conv-9")
    assert conversation_key(named) == conversation_key(ChatRequest.of("something else", cache_key="conv-9"))
    assert conversation_key(named) != conversation_key(ChatRequest.of("Plan a trip.", cache_key="conv-8"))
    assert conversation_key(named) != conversation_key(ChatRequest.of("Plan a trip."))
    body = openai_chat(prompt_cache_key="body-name")
    assert conversation_key(replace(body, cache_key="conv-9")) == conversation_key(named)
    key = conversation_key(named)
    assert key is not None and "conv" not in key and len(key) < 40
    long = "x" * 10_000
    assert conversation_key(ChatRequest.of("a", cache_key=long)) == conversation_key(
        ChatRequest.of("b", cache_key=long[:MAX_NAME_CHARS] + "tail")
    )  # bounded before hashing


def test_session_headers_name_the_conversation_first_found_wins() -> None:
    """x-session-id, Claude Code's and Codex's headers; blank ones are skipped; a huge value is cut."""
    assert session_of(CIMultiDict({"X-Claude-Code-Session-Id": "cc-1"})) == "cc-1"
    assert session_of(CIMultiDict({"session_id": "codex-1", "conversation_id": "codex-1"})) == "codex-1"
    assert session_of(CIMultiDict({"Session-Id": "codex-2"})) == "codex-2"
    assert session_of(CIMultiDict({"x-session-id": "mine", "x-claude-code-session-id": "cc"})) == "mine"
    assert session_of(CIMultiDict({"x-session-id": "  ", "conversation_id": "c"})) == "c"
    assert session_of(CIMultiDict({"user-agent": "x"})) is None
    cut = session_of(CIMultiDict({"x-session-id": "y" * 9000}))
    assert cut is not None and len(cut) == MAX_NAME_CHARS
    assert SESSION_HEADERS[0] == "x-session-id"


@pytest.mark.parametrize("bad", [7, "", b"conv", ["conv"]])
async def test_a_cache_key_that_is_not_a_non_empty_string_is_a_caller_error(bad: object) -> None:
    """InvalidRequest naming cache_key, before any attempt."""
    fleet = Fleet()
    client = Client.from_toml(POOL, adapter_builder=fleet, ledger=False)
    with pytest.raises(InvalidRequest) as caught:
        await client.chat("hi", cache_key=bad)  # type: ignore[arg-type]
    assert caught.value.path == "cache_key"
    assert not any(p.calls for p in fleet.built.values())


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_with_one_cache_key_go_to_one_member_whatever_their_prefix(stream: bool) -> None:
    """Each call has another first message (another prefix), one cache_key: all go where the first went.

    Without the key least_busy's alternating ties would spread them over both members.
    """
    clock = FakeClock()
    fleet = Fleet()
    client = Client.from_toml(POOL, adapter_builder=fleet, env=clock.env, ledger=False, chance=Alternate())
    served: list[str] = []
    for n in range(6):
        prompt = [{"role": "user", "content": f"question {n}"}]
        if stream:
            reply = client.stream(prompt, cache_key="session-1")
            async for _ in reply:
                pass
            served.append(reply.response.served.provider)
        else:
            served.append((await client.chat(prompt, cache_key="session-1")).served.provider)
    assert len(set(served)) == 1
    spread = {(await client.chat([{"role": "user", "content": f"other {n}"}])).served.provider for n in range(6)}
    assert spread == {"openai.a", "openai.b"}  # the same calls without a name: each prefix is its own conversation


FALLBACK_POOL = """
default_provider = "duo"
[reliability]
provider_retries = 0
[providers.models.openai.a]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.openai.b]
api_key = "sk-b"
model = "gpt-4.1"
[providers.models.anthropic.backup]
api_key = "sk-c"
model = "claude-sonnet-4-5"
[pools.duo]
members = ["openai.a", "openai.b"]
strategy = "ordered"
fallback = ["anthropic.backup"]
"""


def pinned_to(client: Client, messages: list[dict[str, str]]) -> str | None:
    """The member ``messages``' conversation is pinned to in ``client`` (None: not pinned)."""
    affinity = client.factory.affinity
    assert affinity is not None
    key = conversation_key(ChatRequest.of(messages))
    assert key is not None
    pin = affinity.pinned(key)
    return pin.member if pin is not None else None


def talk(topic: str, turn: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"about {topic}"}] + [
        {"role": r, "content": f"{r} {i}"} for i in range(1, turn) for r in ("assistant", "user")
    ]


async def test_a_fallback_that_served_a_turn_is_the_new_pin_of_that_conversation_only() -> None:
    """X and Y are pinned to a, Z to b. a fails X's turn: b serves it and X moves to b; Y stays on a.

    Then both members fail Z's turn: the pool's fallback serves it and becomes Z's pin; X and Y keep theirs.
    """
    clock = FakeClock()
    fleet = Fleet()
    client = Client.from_toml(FALLBACK_POOL, adapter_builder=fleet, env=clock.env, ledger=False)
    served = [(await client.chat(talk(topic, 1))).served.provider for topic in ("x", "y", "z")]
    assert served == ["openai.a", "openai.a", "openai.b"]  # a holds its share: z, new, goes to b
    member_a = next(p for (name, _), p in fleet.built.items() if name == "openai.a")
    member_b = next(p for (name, _), p in fleet.built.items() if name == "openai.b")
    member_a.steps = [err(500), "ok from openai.a"]
    assert (await client.chat(talk("x", 2))).served.provider == "openai.b"
    assert (pinned_to(client, talk("x", 1)), pinned_to(client, talk("y", 1))) == ("openai.b", "openai.a")
    assert [(await client.chat(talk("y", t))).served.provider for t in (2, 3)] == ["openai.a"] * 2
    assert [(await client.chat(talk("x", t))).served.provider for t in (3, 4)] == ["openai.b"] * 2
    member_a.steps, member_b.steps = [err(500), "ok from openai.a"], [err(500), "ok from openai.b"]
    assert (await client.chat(talk("z", 2))).served.provider == "anthropic.backup"
    pins = [pinned_to(client, talk(topic, 1)) for topic in ("x", "y", "z")]
    assert pins == ["openai.b", "openai.a", "anthropic.backup"]


def test_a_prefix_orjson_refuses_still_has_a_key() -> None:
    """A lone surrogate in a message (which orjson cannot encode) gets a key, stable, and its own."""
    odd = ChatRequest.of([{"role": "system", "content": "s\ud800"}, {"role": "user", "content": "u"}])
    key = conversation_key(odd)
    assert key is not None and key == conversation_key(odd)
    assert key != conversation_key(
        ChatRequest.of([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    )


def test_a_long_prefix_is_keyed_by_the_two_ends_and_the_length_of_each_part() -> None:
    """A 10 KB system prompt or a 1 MB image costs its ends to hash: a change there or in a length moves the key."""

    def key(system: str, user: str = "Plan a trip.", image: str | None = None) -> str | None:
        content: Any = (
            user
            if image is None
            else [{"type": "text", "text": user}, {"type": "image_url", "image_url": {"url": image}}]
        )
        return conversation_key(
            ChatRequest.of([{"role": "system", "content": system}, {"role": "user", "content": content}])
        )

    head, tail = "h" * 5000, "t" * 5000
    base = key(f"{head}middle{tail}")
    assert base == key(f"{head}MIDDLE{tail}")  # only the middle differs: hashed alike
    assert len({base, key(f"H{head[1:]}middle{tail}"), key(f"{head}middle{tail[1:]}T"), key(f"{head}mid{tail}")}) == 4
    assert base != key(f"{head}middle{tail}", "Plan a trip to Rome.")
    data = "data:image/png;base64," + "A" * 1_000_000
    assert key("s", image=data) == key("s", image=data) != key("s", image=data[:-1] + "B")
    assert key("s", image=data) != key("s", image=data + "AAAA")
