"""``POST /v1/embeddings`` served by Bedrock (Titan, Cohere) and Vertex AI, validated against OpenAI's schema."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import openai
import pytest
from gateway_support import GATEWAY_KEY, config, gateway, post
from openapi_schema import assert_valid

from google_creds import service_account_file
from turnout.sim import Simulator
from turnout.sim.wire.embeddings import sim_vector

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"
TEXTS = ["first text", "second text", "third text"]


def bedrock(sim: Simulator, name: str, model: str, *, region: str = "us-east-1", extra: str = "") -> str:
    return (
        f'[providers.models.{name}]\nuri = "{sim.url}"\nregion = "{region}"\n'
        f'api_key = "bedrock-key-{region}"\nmodel = "{model}"\n{extra}'
    )


def vertex(sim: Simulator, tmp_path: Path, name: str, model: str) -> str:
    credentials = service_account_file(tmp_path, sim.google_token_uri)
    return (
        f'[providers.models.{name}]\nuri = "{sim.url}"\nproject = "sim-project"\nregion = "us-central1"\n'
        f'model = "{model}"\ncredentials_file = "{credentials}"\n'
    )


def upstream(sim: Simulator, tmp_path: Path, kind: str) -> tuple[str, str, str, int]:
    """``(default profile, its table, model, the vectors' own size)`` of each cloud model."""
    if kind == "titan":
        return "bedrock.up", bedrock(sim, "bedrock.up", TITAN), TITAN, 1024
    if kind == "cohere":
        return "bedrock.up", bedrock(sim, "bedrock.up", COHERE), COHERE, 1024
    return "vertex.up", vertex(sim, tmp_path, "vertex.up", "text-embedding-005"), "text-embedding-005", 768


@pytest.mark.parametrize("kind", ["titan", "cohere", "vertex"])
async def test_a_cloud_served_answer_is_openais_and_validates(sim: Simulator, tmp_path: Path, kind: str) -> None:
    """The official SDK gets the vectors in input order; the body is a valid ``CreateEmbeddingResponse``."""
    name, table, model, size = upstream(sim, tmp_path, kind)
    async with gateway(config(name, table)) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": TEXTS, "encoding_format": "float"})
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=GATEWAY_KEY, max_retries=0) as client:
            decoded = await client.embeddings.create(model="", input=TEXTS)  # the SDK asks for base64
    assert answer.status == 200, answer.body
    assert_valid("CreateEmbeddingResponse", answer.json())
    expected = [sim_vector(model, t, size) for t in TEXTS]
    assert [d["embedding"] for d in answer.json()["data"]] == expected
    assert answer.json()["model"] == model and answer.headers["x-turnout-provider"] == name
    assert answer.json()["usage"]["prompt_tokens"] == 6  # one token per word, as the simulator counts
    assert [d.embedding for d in decoded.data] == [pytest.approx(v, rel=1e-6) for v in expected]


async def test_a_base64_answer_validates_with_its_vectors_decoded(sim: Simulator) -> None:
    """``encoding_format=base64`` from Titan at 256 dimensions.

    OpenAI's schema types ``Embedding.embedding`` as an array of floats only, while the same document's
    ``CreateEmbeddingRequest.encoding_format`` says ``base64`` returns the vector as a base64 string (and its
    SDKs ask for that by default). We follow the document's description: the string must decode to 256
    little-endian float32 numbers, and the body with each string decoded must validate.
    """
    async with gateway(config("bedrock.up", bedrock(sim, "bedrock.up", TITAN))) as server:
        answer = await post(
            server, "/v1/embeddings", {"model": "", "input": TEXTS, "encoding_format": "base64", "dimensions": 256}
        )
    assert answer.status == 200
    body: dict[str, Any] = answer.json()
    for item, text in zip(body["data"], TEXTS, strict=True):
        raw = base64.b64decode(item["embedding"], validate=True)
        item["embedding"] = list(struct.unpack("<256f", raw))
        assert item["embedding"] == pytest.approx(sim_vector(TITAN, text, 256), rel=1e-6)
    assert_valid("CreateEmbeddingResponse", body)


async def test_the_gateway_fails_titan_over_to_another_region_never_to_another_model() -> None:
    """us-east-1 throttles; the Cohere fallback (another space) is skipped; Titan in us-west-2 serves."""
    async with Simulator() as east, Simulator() as west:
        east.set_script({"models": {TITAN: {"steps": [{"do": "status", "status": 429}], "after_last": "repeat"}}})
        toml = config(
            "bedrock.east",
            bedrock(east, "bedrock.east", TITAN, extra='fallback = ["bedrock.cohere", "bedrock.west"]\n'),
            bedrock(east, "bedrock.cohere", COHERE),
            bedrock(west, "bedrock.west", TITAN, region="us-west-2"),
        ).replace("provider_retries = 1", "provider_retries = 0")
        async with gateway(toml) as server:
            answer = await post(server, "/v1/embeddings", {"model": "", "input": "one text"})
    assert answer.status == 200
    assert answer.headers["x-turnout-provider"] == "bedrock.west"
    assert "x-turnout-fallback" in answer.headers
    assert answer.json()["data"][0]["embedding"] == sim_vector(TITAN, "one text", 1024)
    assert {e.model for e in east.log} == {TITAN} and len(west.log) == 1


@pytest.mark.parametrize(("model", "dimensions"), [(TITAN, 300), (COHERE, 512)])
async def test_a_size_bedrock_cannot_make_is_a_400_and_validates(sim: Simulator, model: str, dimensions: int) -> None:
    """Titan makes 256, 512 or 1024 numbers, Cohere v3 1024: another ``dimensions`` is a 400, nothing is sent."""
    async with gateway(config("bedrock.up", bedrock(sim, "bedrock.up", model))) as server:
        answer = await post(server, "/v1/embeddings", {"model": "", "input": "x", "dimensions": dimensions})
    assert answer.status == 400
    assert f"not {dimensions}" in answer.json()["error"]["message"]
    assert_valid("ErrorResponse", answer.json())
    assert sim.log == []
