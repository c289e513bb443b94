"""Structured output on every surface, translated to each upstream's native form, never silently ignored."""

from __future__ import annotations

import anthropic
import openai
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, config, gateway, post, profile
from pydantic import BaseModel

from turnout.sim import Simulator

PROTOCOLS = ["openai", "responses", "anthropic", "gemini", "ollama"]


class City(BaseModel):
    name: str
    population: int


class Weather(BaseModel):
    city: City
    summary: str
    warm: bool


def one_profile(sim: Simulator, protocol: str, extra: str = "") -> str:
    family = {"responses": "openai"}.get(protocol, protocol)
    return config(f"{family}.main", profile(sim, f"{family}.main", "sim-ok", protocol=protocol, extra=extra))


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_openai_parse_is_served_by_every_upstream(sim: Simulator, protocol: str) -> None:
    """The openai SDK's chat .parse (json_schema, strict, nested $defs) gets a parsed object from every upstream."""
    async with gateway(one_profile(sim, protocol)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        done = await client.chat.completions.parse(model="", messages=MESSAGES, response_format=Weather)
        await client.close()
    parsed = done.choices[0].message.parsed
    assert isinstance(parsed, Weather) and parsed.city.name


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_openai_parse_streams_from_every_upstream(sim: Simulator, protocol: str) -> None:
    """Streaming structured output (the SDK's stream helper) parses the streamed JSON."""
    async with gateway(one_profile(sim, protocol)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        async with client.chat.completions.stream(model="", messages=MESSAGES, response_format=Weather) as stream:
            final = await stream.get_final_completion()
        await client.close()
    assert isinstance(final.choices[0].message.parsed, Weather)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_json_object_is_honoured(sim: Simulator, protocol: str) -> None:
    """response_format json_object answers a JSON object on every upstream."""
    async with gateway(one_profile(sim, protocol)) as server:
        raw = await post(
            server,
            "/v1/chat/completions",
            {"model": "", "messages": MESSAGES, "response_format": {"type": "json_object"}},
        )
    assert raw.status == 200
    assert raw.json()["choices"][0]["message"]["content"].lstrip().startswith("{")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_anthropic_structured_output_from_every_upstream(sim: Simulator, protocol: str) -> None:
    """The anthropic SDK's messages.parse (output_config.format) gets a parsed object from every upstream."""
    async with gateway(one_profile(sim, protocol)) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
        done = await client.messages.parse(model="", max_tokens=200, messages=MESSAGES, output_format=Weather)
        await client.close()
    assert isinstance(done.parsed_output, Weather)


async def test_entry_without_structured_output_is_skipped(sim: Simulator) -> None:
    """An entry that cannot honour a schema is skipped: the fallback that can serves it."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-ok", extra='structured_output = false\nfallback = ["anthropic.b"]\n'),
        profile(sim, "anthropic.b", "sim-ok", protocol="anthropic"),
    )
    async with gateway(toml) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        raw = await client.chat.completions.with_raw_response.parse(
            model="", messages=MESSAGES, response_format=Weather
        )
        await client.close()
    assert raw.headers["x-turnout-provider"] == "anthropic.b"
    assert [e.protocol for e in sim.log] == ["anthropic"]


async def test_no_entry_for_structured_output_is_a_400_not_ignored(sim: Simulator) -> None:
    """When no entry can honour the schema the answer is a 400 naming response_format and the route."""
    async with gateway(one_profile(sim, "openai", extra="structured_output = false\n")) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.parse(model="openai.main", messages=MESSAGES, response_format=Weather)
        await client.close()
    assert "response_format" in info.value.message and "route 'openai.main'" in info.value.message
    assert len(sim.log) == 0
