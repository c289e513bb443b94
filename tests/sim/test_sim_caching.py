"""The simulator's prompt caching (a script's ``[cache] ttl``): cached prefixes per deployment, in each protocol."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import FakeClock, Wire
from turnout.core.errors import ConfigError
from turnout.sim import Script, Simulator

SYSTEM = "You are a careful assistant who answers briefly"  # 8 words
FIRST = "What is the capital of France"  # 6 words
SECOND = "And of Italy"  # 3 words
ANSWER = "Paris it is"  # 3 words


def openai(turns: list[str]) -> tuple[str, dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(turns):
        if i:
            messages.append({"role": "assistant", "content": ANSWER})
        messages.append({"role": "user", "content": text})
    return "/v1/chat/completions", {"model": "m", "messages": messages}


def anthropic(turns: list[str]) -> tuple[str, dict[str, Any]]:
    _, body = openai(turns)
    messages = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in body["messages"][1:]]
    return "/v1/messages", {"model": "m", "max_tokens": 10, "system": SYSTEM, "messages": messages}


def gemini(turns: list[str]) -> tuple[str, dict[str, Any]]:
    _, body = openai(turns)
    contents = [
        {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
        for m in body["messages"][1:]
    ]
    return "/v1beta/models/m:generateContent", {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": contents,
    }


def responses(turns: list[str]) -> tuple[str, dict[str, Any]]:
    _, body = openai(turns)
    return "/v1/responses", {"model": "m", "instructions": SYSTEM, "input": body["messages"][1:]}


def cached_of(path: str, body: dict[str, Any]) -> tuple[int, int]:
    """(cached, written) as the protocol reports them (0 written for those that do not report writes)."""
    if path == "/v1/chat/completions":
        return body["usage"]["prompt_tokens_details"]["cached_tokens"], 0
    if path == "/v1/messages":
        return body["usage"]["cache_read_input_tokens"], body["usage"]["cache_creation_input_tokens"]
    if path == "/v1/responses":
        return body["usage"]["input_tokens_details"]["cached_tokens"], 0
    return body["usageMetadata"].get("cachedContentTokenCount", 0), 0


PROTOCOLS = {"openai": openai, "anthropic": anthropic, "gemini": gemini, "responses": responses}
KEY = {"Authorization": "Bearer sk-one", "x-api-key": "sk-one", "x-goog-api-key": "sk-one"}
OTHER = {"Authorization": "Bearer sk-two", "x-api-key": "sk-two", "x-goog-api-key": "sk-two"}


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_a_second_turn_reports_its_first_turn_as_cached(sim: Simulator, wire: Wire, protocol: str) -> None:
    """Turn 2 of a conversation reports turn 1's prompt as cached input; turn 1 (first sight) wrote it."""
    sim.set_script(Script.from_dict({"cache": {"ttl": 300}}))
    build = PROTOCOLS[protocol]
    path, first = build([FIRST])
    one = await wire.post(path, first, KEY)
    _, second = build([FIRST, SECOND])
    two = await wire.post(path, second, KEY)
    assert one.status == two.status == 200
    assert cached_of(path, one.json())[0] == 0
    assert cached_of(path, two.json())[0] == 14  # the system prompt and the first question
    if protocol == "anthropic":
        assert cached_of(path, one.json())[1] == 14  # cache creation on first sight
        assert cached_of(path, two.json())[1] == 6  # the answer and the new question


async def test_the_cache_is_per_key_and_expires_after_its_ttl(sim: Simulator, wire: Wire, clock: FakeClock) -> None:
    """Another API key is another deployment's cache; a prefix unseen for longer than the TTL is gone."""
    sim.set_script(Script.from_dict({"cache": {"ttl": 60}}))
    path, first = openai([FIRST])
    _, second = openai([FIRST, SECOND])
    await wire.post(path, first, KEY)
    assert cached_of(path, (await wire.post(path, second, OTHER)).json())[0] == 0
    clock.advance(59)
    assert cached_of(path, (await wire.post(path, second, KEY)).json())[0] == 14  # and refreshed
    clock.advance(61)
    assert cached_of(path, (await wire.post(path, second, KEY)).json())[0] == 0


async def test_without_the_setting_nothing_is_cached(wire: Wire) -> None:
    """Prompt caching is opt-in: without ``[cache]`` a repeated prompt reports no cached input."""
    path, first = openai([FIRST])
    await wire.post(path, first, KEY)
    assert cached_of(path, (await wire.post(path, first, KEY)).json())[0] == 0


def test_a_bad_ttl_names_its_key_path() -> None:
    """``[cache] ttl`` must be a positive number of seconds; the error names cache.ttl."""
    with pytest.raises(ConfigError) as err:
        Script.from_dict({"cache": {"ttl": 0}})
    assert err.value.path == "cache.ttl"
