"""Client libraries used as their users do, against the gateway with simulator upstreams.

openai-agents with its default (Responses) model, LangChain's structured output, and the anthropic SDK with a
document block; the openai and anthropic SDKs' own paths are covered surface by surface in the other files.
"""

from __future__ import annotations

import agents
import anthropic
import langchain_openai
import openai
import pytest
from capture import CAPTURED_TEXT, capture_upstream
from gateway_support import GATEWAY_KEY, SIM_TEXT, config, gateway, profile
from pydantic import BaseModel
from test_gateway_anthropic_extras import DOCUMENT, anthropic_profile

from turnout.sim import Simulator

PROTOCOLS = ["openai", "responses", "anthropic", "gemini", "ollama"]


class Forecast(BaseModel):
    city: str
    celsius: int


def one(sim: Simulator, protocol: str) -> str:
    """One upstream of ``protocol``; clients may name any model (the simulator's model names script it)."""
    family = {"responses": "openai"}.get(protocol, protocol)
    return config(
        f"{family}.main", profile(sim, f"{family}.main", "sim-ok", protocol=protocol), extra="allow_any_model = true\n"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_openai_agents_default_model_runs_a_tool_turn(sim: Simulator, protocol: str) -> None:
    """An openai-agents Agent (default Responses model) calls a function tool and answers, over any upstream."""
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    async with gateway(one(sim, protocol)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        provider = agents.OpenAIProvider(openai_client=client)  # its default model: the Responses API
        agent = agents.Agent(
            name="weather", instructions="Use the tool.", model="sim-ok-tc1-then-ok", tools=[get_weather]
        )
        run_config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
        result = await agents.Runner.run(agent, "What is the weather in Paris?", run_config=run_config)
        await client.close()
    assert calls == ["Paris"]
    assert result.final_output == SIM_TEXT
    assert len(sim.log) == 2  # the tool turn and the answer
    assert isinstance(provider.get_model("m"), agents.OpenAIResponsesModel)


@pytest.mark.parametrize("use_responses_api", [False, True])
async def test_langchain_structured_output(sim: Simulator, use_responses_api: bool) -> None:
    """LangChain's with_structured_output (its default json_schema method) returns the model object."""
    toml = config("anthropic.main", profile(sim, "anthropic.main", "sim-ok", protocol="anthropic"))
    async with gateway(toml) as server:
        llm = langchain_openai.ChatOpenAI(
            base_url=server.url + "/v1",
            api_key=GATEWAY_KEY,
            model="anthropic.main",
            max_retries=0,
            use_responses_api=use_responses_api,
        )
        forecast = await llm.with_structured_output(Forecast).ainvoke("Weather in Paris?")
        await llm.root_async_client.close()
    assert isinstance(forecast, Forecast)


async def test_anthropic_sdk_passes_a_document_block_through() -> None:
    """The anthropic SDK's document block reaches an Anthropic upstream unchanged and the answer comes back."""
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
            client = anthropic.AsyncAnthropic(base_url=server.url, api_key=GATEWAY_KEY, max_retries=0)
            reply = await client.messages.create(
                model="",
                max_tokens=50,
                messages=[{"role": "user", "content": [DOCUMENT, {"type": "text", "text": "Colour?"}]}],
            )
            await client.close()
        assert cap.last.body["messages"][0]["content"][0] == DOCUMENT
    assert reply.content[0].type == "text" and reply.content[0].text == CAPTURED_TEXT
