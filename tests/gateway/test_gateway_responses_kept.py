"""previous_response_id on POST /v1/responses: kept conversations, per client key, in memory and through Redis."""

from __future__ import annotations

import uuid

import openai
import pytest
from gateway_support import GATEWAY_KEY, config, gateway, post, profile

from turnout.gateway import GatewayServer
from turnout.sim import Simulator

OTHER_KEY = "gw-test-key-2"


def one(sim: Simulator, extra: str = "", *, settings: str = "") -> str:
    """Two client keys (``settings``: more ``[gateway]`` keys), one simulated upstream."""
    keys = f'[gateway]\napi_keys = ["{GATEWAY_KEY}", "{OTHER_KEY}"]\n{settings}'
    return config("openai.main", profile(sim, "openai.main", "sim-ok"), keys=False, extra=keys + extra)


def sdk(server: GatewayServer, key: str = GATEWAY_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


async def test_a_second_turn_replays_the_kept_conversation(sim: Simulator) -> None:
    """A request naming the previous response's id reaches the upstream with that conversation before its input."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="one two three")
        second = await client.responses.create(model="", input="four", previous_response_id=first.id)
        alone = await client.responses.create(model="", input="four")
        await client.close()
    assert first.store is True and first.previous_response_id is None
    assert second.store is True and second.previous_response_id == first.id and second.id != first.id
    assert first.usage is not None and second.usage is not None and alone.usage is not None
    # the simulator counts the words it received: turn 1's input and answer, then turn 2's input
    answer_words = len(first.output_text.split())
    assert second.usage.input_tokens == first.usage.input_tokens + answer_words + alone.usage.input_tokens


async def test_a_streamed_turn_is_kept_and_can_be_continued_streamed(sim: Simulator) -> None:
    """A streamed answer is kept before its completion event; a streamed request can continue it."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        async with client.responses.stream(model="", input="one two three") as stream:
            async for _ in stream:
                pass
            first = await stream.get_final_response()
        async with client.responses.stream(model="", input="four", previous_response_id=first.id) as stream:
            async for _ in stream:
                pass
            second = await stream.get_final_response()
        await client.close()
    assert first.store is True and second.previous_response_id == first.id
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens == first.usage.input_tokens + len(first.output_text.split()) + 1


async def test_a_chain_of_turns_carries_every_earlier_turn(sim: Simulator) -> None:
    """Turn 3 names turn 2, which named turn 1: the upstream gets all three turns."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="a")
        second = await client.responses.create(model="", input="b", previous_response_id=first.id)
        third = await client.responses.create(model="", input="c", previous_response_id=second.id)
        await client.close()
    words = len(first.output_text.split())
    assert third.usage is not None
    assert third.usage.input_tokens == 3 + 2 * words


async def test_another_key_gets_not_found_like_an_unknown_id(sim: Simulator) -> None:
    """Another client key naming a kept id is answered exactly as an unknown id is: 404 previous_response_not_found."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="secret words")
        await client.close()
        stranger = sdk(server, OTHER_KEY)
        with pytest.raises(openai.NotFoundError) as theirs:
            await stranger.responses.create(model="", input="x", previous_response_id=first.id)
        await stranger.close()
        unknown = await post(
            server, "/v1/responses", {"model": "", "input": "x", "previous_response_id": "resp_nothing"}, key=OTHER_KEY
        )
        other = await post(
            server, "/v1/responses", {"model": "", "input": "x", "previous_response_id": first.id}, key=OTHER_KEY
        )
    assert theirs.value.status_code == 404
    assert unknown.status == other.status == 404
    body, unknown_body = other.json()["error"], unknown.json()["error"]
    assert body["code"] == unknown_body["code"] == "previous_response_not_found"
    assert body["type"] == "invalid_request_error" and body["param"] == "previous_response_id"
    assert body["message"] == unknown_body["message"].replace("resp_nothing", first.id)
    assert len(sim.log) == 1  # neither refused request reached the upstream


async def test_store_false_keeps_nothing(sim: Simulator) -> None:
    """With store: false the answer says so and its id cannot be continued (nothing is kept)."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="hi", store=False)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="", input="again", previous_response_id=first.id)
        await client.close()
    assert first.store is False


async def test_a_malformed_previous_response_id_is_a_400(sim: Simulator) -> None:
    """A previous_response_id that is not a string of id characters is the caller's 400, before any attempt."""
    async with gateway(one(sim)) as server:
        for value in (12, "resp_\n../x", "r" * 200):
            raw = await post(server, "/v1/responses", {"model": "", "input": "x", "previous_response_id": value})
            assert raw.status == 400 and raw.json()["error"]["param"] == "previous_response_id"
    assert len(sim.log) == 0


async def test_a_conversation_beyond_the_bounds_is_not_kept(sim: Simulator) -> None:
    """With responses_max_items = 2 a three-item conversation is answered but not kept (later: unknown id)."""
    async with gateway(one(sim, settings="responses_max_items = 2\n")) as server:
        client = sdk(server)
        small = await client.responses.create(model="", input="a")
        big = await client.responses.create(
            model="", input=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        kept = await client.responses.create(model="", input="b", previous_response_id=small.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="", input="c", previous_response_id=big.id)
        await client.close()
    assert kept.previous_response_id == small.id


async def test_an_expired_conversation_is_not_found(sim: Simulator) -> None:
    """A conversation older than responses_ttl_secs is answered as an unknown id (the store's clock decides)."""
    from turnout.state.memory import MemoryStore

    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    async with gateway(one(sim, settings="responses_ttl_secs = 60\n"), store=store) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="a")
        now[0] += 59
        await client.responses.create(model="", input="b", previous_response_id=first.id)
        now[0] += 2
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="", input="c", previous_response_id=first.id)
        await client.close()


@pytest.mark.redis
async def test_two_gateways_share_kept_conversations_through_redis(sim: Simulator, redis_url: str) -> None:
    """A conversation kept by one gateway is continued through another sharing Redis, streamed and not."""
    prefix = f"t-{uuid.uuid4().hex[:8]}:"
    state = f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "{prefix}"\n'
    async with gateway(one(sim, state)) as a, gateway(one(sim, state)) as b:
        left, right = sdk(a), sdk(b)
        first = await left.responses.create(model="", input="one two")
        second = await right.responses.create(model="", input="three", previous_response_id=first.id)
        async with left.responses.stream(model="", input="four", previous_response_id=second.id) as stream:
            async for _ in stream:
                pass
            third = await stream.get_final_response()
        stranger = sdk(b, OTHER_KEY)
        with pytest.raises(openai.NotFoundError):
            await stranger.responses.create(model="", input="x", previous_response_id=first.id)
        for c in (left, right, stranger):
            await c.close()
    words = len(first.output_text.split())
    assert second.usage is not None and third.usage is not None
    assert second.usage.input_tokens == 2 + words + 1
    assert third.usage.input_tokens == 2 + 2 * words + 2
    assert third.previous_response_id == second.id


async def test_a_store_false_request_may_continue_a_kept_response_without_being_kept(sim: Simulator) -> None:
    """store: false with previous_response_id replays the kept conversation, echoes the id, and keeps nothing."""
    async with gateway(one(sim)) as server:
        client = sdk(server)
        first = await client.responses.create(model="", input="one two")
        second = await client.responses.create(model="", input="x", previous_response_id=first.id, store=False)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="", input="y", previous_response_id=second.id)
        await client.close()
    assert second.store is False and second.previous_response_id == first.id
    assert second.usage is not None and second.usage.input_tokens == 2 + len(first.output_text.split()) + 1
