"""POST /v1/responses: the Responses API over any upstream, whole and streamed, with the openai SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from gateway_support import GATEWAY_KEY, SIM_TEXT, config, gateway, post, profile
from pydantic import BaseModel

from turnout.gateway import GatewayServer
from turnout.sim import Simulator

PROTOCOLS = ["openai", "responses", "anthropic", "gemini", "ollama"]
TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Answer(BaseModel):
    city: str
    degrees: int


def one(sim: Simulator, protocol: str, model: str = "sim-ok") -> str:
    family = {"responses": "openai"}.get(protocol, protocol)
    return config(f"{family}.main", profile(sim, f"{family}.main", model, protocol=protocol))


def sdk(server: GatewayServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_create_is_served_by_every_upstream(sim: Simulator, protocol: str) -> None:
    """responses.create answers a response object (output_text, usage, attribution headers) from every upstream."""
    async with gateway(one(sim, protocol)) as server:
        client = sdk(server)
        raw = await client.responses.with_raw_response.create(model="", input="Hi", instructions="Be brief.")
        await client.close()
    response = raw.parse()
    assert response.output_text == SIM_TEXT and response.status == "completed"
    assert response.usage is not None and response.usage.output_tokens > 0
    assert raw.headers["x-turnout-model"] == "sim-ok" and raw.headers["request-id"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_has_the_responses_event_sequence(sim: Simulator, protocol: str) -> None:
    """responses.stream gives created, in_progress, item and text events, then completed with usage."""
    async with gateway(one(sim, protocol)) as server:
        client = sdk(server)
        async with client.responses.stream(model="", input="Hi") as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        await client.close()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ):
        assert kind in kinds
    assert kinds[-1] == "response.completed"
    assert final.output_text == SIM_TEXT and final.usage is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("streamed", [False, True])
async def test_function_tools_round_trip(sim: Simulator, protocol: str, streamed: bool) -> None:
    """A function call comes back as a function_call item; its output sent back in input is answered."""
    async with gateway(one(sim, protocol, "sim-ok-tc1-then-ok")) as server:
        client = sdk(server)
        if streamed:
            async with client.responses.stream(model="", input="Weather in Paris?", tools=[TOOL]) as stream:
                kinds = [event.type async for event in stream]
                first = await stream.get_final_response()
            assert "response.function_call_arguments.delta" in kinds
            assert "response.function_call_arguments.done" in kinds
        else:
            first = await client.responses.create(model="", input="Weather in Paris?", tools=[TOOL])
        calls = [item for item in first.output if item.type == "function_call"]
        assert [c.name for c in calls] == ["get_weather"]
        follow = [
            {"role": "user", "content": "Weather in Paris?"},
            *[c.model_dump(exclude_none=True) for c in first.output],
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp": 21}'},
        ]
        second = await client.responses.create(model="", input=follow, tools=[TOOL])
        await client.close()
    assert second.output_text == SIM_TEXT


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_text_format_structured_output(sim: Simulator, protocol: str) -> None:
    """responses.parse with text_format gets a parsed object from every upstream."""
    async with gateway(one(sim, protocol)) as server:
        client = sdk(server)
        parsed = await client.responses.parse(model="", input="Weather?", text_format=Answer)
        await client.close()
    assert isinstance(parsed.output_parsed, Answer)


async def test_reasoning_summaries_when_asked(sim: Simulator) -> None:
    """With reasoning.summary the upstream's reasoning comes back as a reasoning item (whole and streamed)."""
    async with gateway(one(sim, "anthropic", "sim-ok-r5")) as server:
        client = sdk(server)
        whole = await client.responses.create(model="", input="Think", reasoning={"summary": "auto"})
        plain = await client.responses.create(model="", input="Think")
        async with client.responses.stream(model="", input="Think", reasoning={"summary": "auto"}) as stream:
            kinds = [event.type async for event in stream]
        await client.close()
    assert [i.type for i in whole.output] == ["reasoning", "message"]
    assert [i.type for i in plain.output] == ["message"]
    assert "response.reasoning_summary_text.delta" in kinds


async def drain(client: openai.AsyncOpenAI) -> None:
    async with client.responses.stream(model="", input="Hi") as stream:
        async for _ in stream:
            pass


async def test_cut_stream_ends_with_error_and_failed(sim: Simulator) -> None:
    """A stream cut after output ends with an error event and response.failed, never response.completed."""
    async with gateway(one(sim, "openai", "sim-cut-a3")) as server:
        raw = await post(server, "/v1/responses", {"model": "", "input": "Hi", "stream": True})
        client = sdk(server)
        with pytest.raises(openai.APIError):
            await drain(client)
        await client.close()
    names = [name for name, _ in raw.events()]
    assert names[-2:] == ["error", "response.failed"] and "response.completed" not in names


async def test_responses_upstream_gets_the_client_body(sim: Simulator) -> None:
    """A tool kind only the Responses API has passes to a Responses upstream and is a 400 for another."""
    body = {"model": "", "input": "Hi", "tools": [{"type": "web_search"}]}
    async with gateway(one(sim, "responses")) as server:
        served = await post(server, "/v1/responses", body)
    async with gateway(one(sim, "anthropic")) as server:
        refused = await post(server, "/v1/responses", body)
    assert served.status == 200
    assert refused.status == 400 and "tools[0] (web_search)" in refused.json()["error"]["message"]
