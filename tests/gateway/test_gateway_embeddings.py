"""``POST /v1/embeddings`` through the official openai SDK, against the gateway on loopback over simulator upstreams."""

from __future__ import annotations

import base64
import struct

import openai
import orjson
import pytest
from gateway_support import GATEWAY_KEY, config, gateway, post, profile
from openapi_schema import assert_valid

from turnout.gateway import GatewayServer
from turnout.gateway.embeddings import base64_vector
from turnout.sim import Simulator
from turnout.sim.wire.embeddings import sim_vector


def sdk(server: GatewayServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=GATEWAY_KEY, max_retries=0)


@pytest.mark.parametrize("protocol", ["openai", "gemini", "ollama"])
async def test_the_sdk_embeds_through_every_upstream_protocol(sim: Simulator, protocol: str) -> None:
    """``client.embeddings.create`` gets the vectors in input order, whatever protocol the upstream speaks."""
    family = "openai" if protocol == "openai" else protocol
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "text-embedding-3-small", protocol=protocol))
    texts = ["first text", "second text", "third text"]
    async with gateway(toml) as server, sdk(server) as client:
        raw = await client.embeddings.with_raw_response.create(
            model="", input=texts, dimensions=8, encoding_format="float"
        )
    result = raw.parse()
    assert result.object == "list"
    assert [d.index for d in result.data] == [0, 1, 2]
    assert [d.embedding for d in result.data] == [sim_vector("text-embedding-3-small", t, 8) for t in texts]
    assert result.model == "text-embedding-3-small"
    assert result.usage.prompt_tokens == result.usage.total_tokens > 0
    assert raw.headers["x-turnout-provider"] == f"{family}.up"
    assert raw.headers["x-turnout-attempts"] == "1"


async def test_base64_is_little_endian_float32_as_openai_sends_it(sim: Simulator) -> None:
    """``encoding_format=base64`` carries each vector's little-endian float32 bytes; the SDK decodes them."""
    toml = config("openai.up", profile(sim, "openai.up", "text-embedding-3-small"))
    async with gateway(toml) as server:
        answer = await post(
            server,
            "/v1/embeddings",
            {"model": "", "input": "one text", "encoding_format": "base64", "dimensions": 4},
        )
        async with sdk(server) as client:
            decoded = await client.embeddings.create(model="", input="one text", dimensions=4)  # SDK asks base64
    expected = sim_vector("text-embedding-3-small", "one text", 4)
    raw = base64.b64decode(answer.json()["data"][0]["embedding"])
    assert list(struct.unpack("<4f", raw)) == pytest.approx(expected, rel=1e-6)
    assert decoded.data[0].embedding == pytest.approx(expected, rel=1e-6)


def test_base64_vector_bytes() -> None:
    """1.0 and -2.0 as float32 little-endian, base64-encoded."""
    assert base64.b64decode(base64_vector([1.0, -2.0])) == b"\x00\x00\x80\x3f\x00\x00\x00\xc0"


async def test_a_fallback_to_another_model_is_not_taken_by_the_gateway(sim: Simulator) -> None:
    """The gateway's embeddings keep to one vector space: the other model is not tried, the error is a 502."""
    sim.set_script({"models": {"emb-a": {"steps": [{"do": "status", "status": 503}]}}})
    toml = config(
        "openai.a",
        profile(sim, "openai.a", "emb-a", extra='fallback = ["openai.b"]\n'),
        profile(sim, "openai.b", "emb-b"),
    )
    async with gateway(toml) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": ["x"]})
    assert answer.status == 502
    assert answer.headers["x-turnout-attempts"] == "2"
    assert [e.model for e in sim.log] == ["emb-a", "emb-a"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "", "input": ["x"], "temperature": 1}, "temperature"),
        ({"model": "", "input": []}, "input"),
        ({"model": "", "input": ["x"], "encoding_format": "int8"}, "encoding_format"),
        ({"model": "", "input": ["x"], "dimensions": "8"}, "dimensions"),
        ({"input": ["x"]}, "model"),
    ],
    ids=["unknown-field", "empty-input", "encoding", "dimensions-type", "no-model"],
)
async def test_a_request_the_gateway_cannot_send_is_a_400(sim: Simulator, body: dict[str, object], param: str) -> None:
    """Unknown fields and malformed values are refused with OpenAI's error shape; nothing is forwarded."""
    toml = config("openai.up", profile(sim, "openai.up", "text-embedding-3-small"))
    async with gateway(toml) as server:
        answer = await post(server, "/v1/embeddings", body)
    assert answer.status == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert sim.log == []


async def test_a_parameter_the_upstream_cannot_take_is_a_400(sim: Simulator) -> None:
    """``user`` to a Gemini-served route is refused (never dropped): a 400 before any upstream call."""
    toml = config("gemini.up", profile(sim, "gemini.up", "text-embedding-004", protocol="gemini"))
    async with gateway(toml) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": "x", "user": "u-1"})
    assert answer.status == 400
    assert "does not take user" in orjson.loads(answer.body)["error"]["message"]
    assert sim.log == []


async def test_embeddings_need_a_gateway_key(sim: Simulator) -> None:
    """Without a client key the answer is 401 and nothing is forwarded."""
    toml = config("openai.up", profile(sim, "openai.up", "text-embedding-3-small"))
    async with gateway(toml) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": "x"}, key=None)
    assert answer.status == 401
    assert sim.log == []


@pytest.mark.parametrize("protocol", ["openai", "gemini", "ollama"])
async def test_the_answer_and_its_errors_validate_against_openais_schema(sim: Simulator, protocol: str) -> None:
    """A float answer is a valid ``CreateEmbeddingResponse`` and a refused request a valid ``ErrorResponse``."""
    toml = config(f"{protocol}.up", profile(sim, f"{protocol}.up", "text-embedding-3-small", protocol=protocol))
    async with gateway(toml) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": ["a", "b"], "encoding_format": "float"})
        refused = await post(server, "/v1/embeddings", {"model": "", "input": []})
    assert answer.status == 200 and refused.status == 400
    assert_valid("CreateEmbeddingResponse", answer.json())
    assert_valid("ErrorResponse", refused.json())
