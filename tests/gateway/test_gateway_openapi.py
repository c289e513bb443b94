"""Every body and stream event of the gateway's OpenAI surface validates against OpenAI's published schemas.

Strict clients (Rust, Go or Java ones generated from OpenAI's OpenAPI document) reject what the official SDKs
accept leniently, so the bodies are checked here against the document itself (``tests/fixtures/openai-openapi``,
see ``openapi_schema.py``), read as raw JSON, for every upstream protocol.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, PROTOCOLS, TOOL, Raw, config, gateway, get, post, profile
from openapi_schema import assert_valid, problems, schemas

from turnout.sim import Simulator

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "degrees": {"type": "integer"}},
    "required": ["city", "degrees"],
    "additionalProperties": False,
}
RESPONSES_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

#: The request variants of Chat Completions: what is added to the body, and the simulator model to ask for.
CHAT_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "plain": ({}, "sim-ok"),
    "tools": ({"tools": [TOOL]}, "sim-ok-tc2"),
    "structured": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}},
        "sim-ok",
    ),
    "reasoning": ({}, "sim-ok-r3"),
    "length": ({"max_tokens": 3}, "sim-ok-t3-len"),
    "refusal": ({}, "sim-refusal"),
}
#: The same for the Responses API.
RESPONSES_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "plain": ({"instructions": "Be brief."}, "sim-ok"),
    "tools": ({"tools": [RESPONSES_TOOL]}, "sim-ok-tc2"),
    "structured": (
        {"text": {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}},
        "sim-ok",
    ),
    "reasoning": ({}, "sim-ok-r3"),
    "length": ({"max_output_tokens": 16}, "sim-ok-t3-len"),
    "refusal": ({}, "sim-refusal"),
}


def one(sim: Simulator, protocol: str, model: str) -> str:
    family = PROTOCOLS[protocol][0]
    return config(f"{family}.main", profile(sim, f"{family}.main", model, protocol=protocol))


def data_events(raw: Raw) -> list[Any]:
    """The JSON payloads of an SSE body, ``[DONE]`` left out."""
    assert raw.status == 200, raw.body[:500]
    return [orjson.loads(data) for _, data in raw.events() if data != "[DONE]"]


def test_the_fixture_holds_the_schemas_the_gateway_answers_with() -> None:
    """The copy of the document has every schema these tests check, with nullable read as "or null"."""
    names = {
        "CreateChatCompletionResponse",
        "CreateChatCompletionStreamResponse",
        "Response",
        "ResponseStreamEvent",
        "ListModelsResponse",
        "Model",
        "ErrorResponse",
        "CreateEmbeddingResponse",
    }
    assert names <= schemas().keys()
    assert '"nullable"' not in orjson.dumps(schemas()).decode()


def test_the_validator_rejects_what_the_schema_forbids() -> None:
    """The check can fail: a Responses usage without cache_write_tokens and a model without owned_by are refused."""
    usage = {
        "input_tokens": 3,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 5,
    }
    assert any("cache_write_tokens" in p for p in problems("ResponseUsage", usage))
    assert problems("Model", {"id": "m", "object": "model", "created": 0})
    assert problems("ErrorResponse", {"error": {"message": "x", "type": "y", "code": None, "param": None}}) == []


@pytest.mark.parametrize("variant", sorted(CHAT_VARIANTS))
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_chat_completion_bodies_validate(sim: Simulator, protocol: str, variant: str) -> None:
    """A whole Chat Completions answer validates as CreateChatCompletionResponse from every upstream."""
    extra, model = CHAT_VARIANTS[variant]
    async with gateway(one(sim, protocol, model)) as server:
        raw = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES, **extra})
    assert raw.status == 200, raw.body[:500]
    assert_valid("CreateChatCompletionResponse", raw.json())


@pytest.mark.parametrize("variant", sorted(CHAT_VARIANTS))
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_chat_completion_chunks_validate(sim: Simulator, protocol: str, variant: str) -> None:
    """Every streamed Chat Completions chunk, the usage chunk included, validates as the stream response."""
    extra, model = CHAT_VARIANTS[variant]
    body = {"model": "", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}, **extra}
    async with gateway(one(sim, protocol, model)) as server:
        chunks = data_events(await post(server, "/v1/chat/completions", body))
    assert len(chunks) >= 3
    for chunk in chunks:
        assert_valid("CreateChatCompletionStreamResponse", chunk)
    last = chunks[-1]
    assert last["choices"] == [] and "usage" in last
    if variant != "refusal":  # a refusal's usage is not known to Turnout: the last chunk says null, as allowed
        assert last["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("variant", sorted(RESPONSES_VARIANTS))
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_response_bodies_validate(sim: Simulator, protocol: str, variant: str) -> None:
    """A whole Responses answer validates as Response from every upstream."""
    extra, model = RESPONSES_VARIANTS[variant]
    async with gateway(one(sim, protocol, model)) as server:
        raw = await post(server, "/v1/responses", {"model": "", "input": "Weather in Paris?", **extra})
    assert raw.status == 200, raw.body[:500]
    assert_valid("Response", raw.json())


@pytest.mark.parametrize("variant", sorted(RESPONSES_VARIANTS))
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_response_stream_events_validate(sim: Simulator, protocol: str, variant: str) -> None:
    """Every streamed Responses event validates as ResponseStreamEvent, and the final response as Response."""
    extra, model = RESPONSES_VARIANTS[variant]
    body = {"model": "", "input": "Weather in Paris?", "stream": True, **extra}
    async with gateway(one(sim, protocol, model)) as server:
        events = data_events(await post(server, "/v1/responses", body))
    for event in events:
        assert_valid("ResponseStreamEvent", event)
    assert events[-1]["type"] in {"response.completed", "response.incomplete"}
    assert_valid("Response", events[-1]["response"])


async def test_cache_tokens_of_an_anthropic_upstream_reach_the_responses_usage(sim: Simulator) -> None:
    """Anthropic's cache-creation and cache-read tokens are the Responses usage's cache_write and cached tokens."""
    sim.set_script(
        {
            "models": {
                "cached": {
                    "steps": [
                        {
                            "do": "ok",
                            "text": "hi",
                            "usage": {"input": 1200, "output": 4, "cached_input": 1000, "cache_write": 150},
                        },
                    ]
                }
            }
        }
    )
    async with gateway(one(sim, "anthropic", "cached")) as server:
        whole = await post(server, "/v1/responses", {"model": "", "input": "Hi"})
        streamed = data_events(await post(server, "/v1/responses", {"model": "", "input": "Hi", "stream": True}))
    for usage in (whole.json()["usage"], streamed[-1]["response"]["usage"]):
        assert usage["input_tokens_details"] == {"cached_tokens": 1000, "cache_write_tokens": 150}
        assert usage["input_tokens"] == 1200


async def test_models_list_and_model_validate(sim: Simulator) -> None:
    """GET /v1/models validates as ListModelsResponse and GET /v1/models/{id} as Model."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server:
        listing = await get(server, "/v1/models")
        first = listing.json()["data"][0]["id"]
        model = await get(server, f"/v1/models/{first}")
    assert listing.status == 200 and model.status == 200
    assert_valid("ListModelsResponse", listing.json())
    assert_valid("Model", model.json())


ERROR_CASES: dict[str, tuple[str, str, Any, str | None]] = {
    # name: (path, upstream model, body, client key)
    "bad_key": ("/v1/chat/completions", "sim-ok", {"model": "", "messages": MESSAGES}, "wrong-key"),
    "unknown_model": ("/v1/chat/completions", "sim-ok", {"model": "no-such-model", "messages": MESSAGES}, None),
    "not_json": ("/v1/chat/completions", "sim-ok", b"{not json", None),
    "bad_field": ("/v1/chat/completions", "sim-ok", {"model": "", "messages": "hi", "n": "x"}, None),
    "rate_limited": ("/v1/chat/completions", "sim-429-ra7", {"model": "", "messages": MESSAGES}, None),
    "all_failed": ("/v1/chat/completions", "sim-500", {"model": "", "messages": MESSAGES}, None),
    "context_window": ("/v1/chat/completions", "sim-context-lim10", {"model": "", "messages": MESSAGES}, None),
    "upstream_400": ("/v1/chat/completions", "sim-400", {"model": "", "messages": MESSAGES}, None),
    "responses_all_failed": ("/v1/responses", "sim-500", {"model": "", "input": "Hi"}, None),
    "responses_bad_field": ("/v1/responses", "sim-ok", {"model": "", "input": 7}, None),
    "models_unknown": ("/v1/models/no-such-model", "sim-ok", None, None),
    "embeddings_all_failed": ("/v1/embeddings", "sim-500", {"model": "", "input": ["a", "b"]}, None),
    "embeddings_rate_limited": ("/v1/embeddings", "sim-429-ra7", {"model": "", "input": "a"}, None),
    "embeddings_bad_field": ("/v1/embeddings", "sim-ok", {"model": "", "input": "a", "n": 2}, None),
    "embeddings_bad_key": ("/v1/embeddings", "sim-ok", {"model": "", "input": "a"}, "wrong-key"),
    "unknown_route": ("/v1/nothing-here", "sim-ok", {}, None),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
async def test_error_bodies_validate(sim: Simulator, case: str) -> None:
    """Every error the OpenAI surface answers validates as ErrorResponse."""
    path, model, body, key = ERROR_CASES[case]
    async with gateway(one(sim, "openai", model)) as server:
        if body is None:
            raw = await get(server, path)
        else:
            raw = await post(server, path, body, key=key or GATEWAY_KEY)
    assert raw.status >= 400, raw.body[:300]
    assert_valid("ErrorResponse", raw.json())


async def test_an_error_inside_a_chat_stream_validates_as_an_error(sim: Simulator) -> None:
    """A stream cut after output ends with a data chunk whose error object validates as Error."""
    body = {"model": "", "messages": MESSAGES, "stream": True}
    async with gateway(one(sim, "openai", "sim-cut-a3")) as server:
        raw = await post(server, "/v1/chat/completions", body)
    payloads = [orjson.loads(data) for _, data in raw.events() if data != "[DONE]"]
    errors = [p for p in payloads if "error" in p]
    assert len(errors) == 1 and payloads[-1] is errors[0]
    assert_valid("ErrorResponse", errors[0])
    for chunk in payloads[:-1]:
        assert_valid("CreateChatCompletionStreamResponse", chunk)


async def test_a_failed_responses_stream_validates(sim: Simulator) -> None:
    """A Responses stream cut after output ends with events that validate, the failed response included."""
    body = {"model": "", "input": "Hi", "stream": True}
    async with gateway(one(sim, "openai", "sim-cut-a3")) as server:
        raw = await post(server, "/v1/responses", body)
    events = data_events(raw)
    for event in events:
        assert_valid("ResponseStreamEvent", event)
    assert events[-1]["type"] in {"response.failed", "error"}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_continued_response_validates(sim: Simulator, stream: bool) -> None:
    """A response continuing a kept one (store true, previous_response_id set) still validates as Response."""
    async with gateway(one(sim, "openai", "sim-ok")) as server:
        first = await post(server, "/v1/responses", {"model": "", "input": "Weather in Paris?"})
        body = {"model": "", "input": "And Rome?", "previous_response_id": first.json()["id"], "stream": stream}
        raw = await post(server, "/v1/responses", body)
    assert raw.status == 200, raw.body[:500]
    answer = data_events(raw)[-1]["response"] if stream else raw.json()
    assert answer["store"] is True and answer["previous_response_id"] == first.json()["id"]
    assert_valid("Response", first.json())
    assert_valid("Response", answer)
