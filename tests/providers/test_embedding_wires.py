"""Each family's embedding wire: the request it sends and the recorded answers it reads (fixtures/embeddings)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from servers import loopback_app
from turnout import Client
from turnout.core.errors import AllProvidersFailed, ErrorClass, ProtocolError, ProviderError, UnsupportedRequest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class Upstream:
    """A loopback upstream answering every POST with one recorded body; it keeps what it was sent."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.body = body
        self.status = status
        self.requests: list[tuple[str, dict[str, str], Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path_qs, dict(request.headers), orjson.loads(await request.read())))
        return web.Response(body=self.body, status=self.status, content_type="application/json")


@asynccontextmanager
async def upstream(body: bytes, status: int = 200) -> AsyncIterator[tuple[Upstream, str]]:
    server = Upstream(body, status)
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    async with loopback_app(app) as url:
        yield server, url


def client(family: str, uri: str, model: str, **extra: Any) -> Client:
    profile: dict[str, Any] = {"uri": uri, "model": model, "api_key": "sk-wire-test", **extra}
    if family == "ollama":
        profile.pop("api_key")
    return Client.from_dict(
        {
            "default_provider": f"{family}.main",
            "providers": {"models": {family: {"main": profile}}},
            "reliability": {"provider_retries": 0},
            "ledger": {"enabled": False},
        }
    )


async def test_openai_wire_sends_its_parameters_and_reads_vectors_by_index() -> None:
    """OpenAI: ``/embeddings`` with model, input, float encoding, dimensions and user; the recorded answer is read."""
    async with (
        upstream(fixture("openai_embedding.json")) as (server, url),
        client("openai", f"{url}/v1", "text-embedding-3-small") as c,
    ):
        reply = await c.embed(["first text", "second text"], dimensions=5, user="user-7")
    path, headers, body = server.requests[0]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == "Bearer sk-wire-test"
    assert body == {
        "model": "text-embedding-3-small",
        "input": ["first text", "second text"],
        "encoding_format": "float",
        "dimensions": 5,
        "user": "user-7",
    }
    assert reply.vectors[0][0] == 0.0057293195 and reply.vectors[1][0] == -0.037104916
    assert reply.usage.input_tokens == 12
    assert reply.cost_usd == pytest.approx(12 * 0.02 / 1_000_000)  # text-embedding-3-small in genai-prices


async def test_openai_wire_puts_vectors_back_in_index_order() -> None:
    """An answer listing its vectors out of order is reassembled by ``index``."""
    data = orjson.loads(fixture("openai_embedding.json"))
    data["data"].reverse()
    async with upstream(orjson.dumps(data)) as (_, url), client("openai", f"{url}/v1", "text-embedding-3-small") as c:
        reply = await c.embed(["first text", "second text"])
    assert [v[0] for v in reply.vectors] == [0.0057293195, -0.037104916]


async def test_openai_wire_sends_token_arrays() -> None:
    """Token arrays go to OpenAI as lists of ids."""
    async with (
        upstream(fixture("openai_embedding.json")) as (server, url),
        client("openai", f"{url}/v1", "text-embedding-3-small") as c,
    ):
        await c.embed([[1, 2, 3], [4, 5]])
    assert server.requests[0][2]["input"] == [[1, 2, 3], [4, 5]]


async def test_azure_wire_uses_the_deployment_url_api_version_and_key_header() -> None:
    """Azure: ``{deployment}/embeddings?api-version=``, the ``api-key`` header."""
    async with upstream(fixture("openai_embedding.json")) as (server, url):
        azure = client(
            "azure",
            f"{url}/openai/deployments/embed-prod",
            "text-embedding-3-small",
            deployment="embed-prod",
            resource="unused",
        )
        async with azure as c:
            await c.embed(["first text", "second text"])
    path, headers, _ = server.requests[0]
    assert path == "/openai/deployments/embed-prod/embeddings?api-version=2024-10-21"
    assert headers["api-key"] == "sk-wire-test"


async def test_gemini_wire_batches_with_output_dimensionality() -> None:
    """Gemini: ``:batchEmbedContents`` with a request per input naming the model and ``outputDimensionality``."""
    async with (
        upstream(fixture("google_batch_embed_contents.json")) as (server, url),
        client("gemini", f"{url}/v1beta", "gemini-embedding-001") as c,
    ):
        reply = await c.embed(["first text", "second text"], dimensions=2)
    path, headers, body = server.requests[0]
    assert path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert headers["x-goog-api-key"] == "sk-wire-test"
    assert body == {
        "requests": [
            {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, "outputDimensionality": 2}
            for t in ("first text", "second text")
        ]
    }
    assert reply.vectors == ([0.5138951, 0.857853], [-0.5045317, -0.8633931])
    assert reply.usage.input_tokens == 12


async def test_gemini_wire_sends_one_input_to_embed_content() -> None:
    """One input goes to ``:embedContent``; without usage in the answer, the estimate is billed."""
    async with (
        upstream(fixture("google_embed_content.json")) as (server, url),
        client("gemini", f"{url}/v1beta", "text-embedding-004") as c,
    ):
        reply = await c.embed("one text to embed")
    path, _, body = server.requests[0]
    assert path == "/v1beta/models/text-embedding-004:embedContent"
    assert body == {"model": "models/text-embedding-004", "content": {"parts": [{"text": "one text to embed"}]}}
    assert len(reply.vectors) == 1 and reply.vectors[0][0] == 0.013168517
    assert reply.usage.input_tokens == 6  # 17 bytes at 3 a token, rounded up


async def test_gemini_error_for_an_oversized_batch_is_a_client_error() -> None:
    """Google's recorded 400 for more than 100 requests is a non-retryable provider error (not retried)."""
    async with (
        upstream(fixture("google_error_batch_over_100.json"), 400) as (server, url),
        client("gemini", f"{url}/v1beta", "text-embedding-004") as c,
    ):
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["a", "b"])
    assert len(server.requests) == 1
    assert info.value.attempts[0].outcome == ErrorClass.NON_RETRYABLE.value
    assert info.value.attempts[0].status == 400


async def test_ollama_wire_sends_dimensions_and_reads_prompt_eval_count() -> None:
    """Ollama: ``/api/embed`` with model, input and dimensions; ``prompt_eval_count`` is the usage."""
    async with upstream(fixture("ollama_embed.json")) as (server, url), client("ollama", url, "all-minilm") as c:
        reply = await c.embed(["first text", "second text"], dimensions=5)
    path, headers, body = server.requests[0]
    assert path == "/api/embed"
    assert "Authorization" not in headers
    assert body == {"model": "all-minilm", "input": ["first text", "second text"], "dimensions": 5}
    assert reply.vectors[1][0] == -0.0098027075
    assert reply.usage.input_tokens == 8


async def test_openai_token_cap_error_is_classified_not_retried() -> None:
    """OpenAI's recorded ``max_tokens_per_request`` 400 moves on at once (a client error, not a retry)."""
    async with (
        upstream(fixture("openai_error_max_tokens_per_request.json"), 400) as (server, url),
        client(
            "openai",
            f"{url}/v1",
            "text-embedding-3-small",
        ) as c,
    ):
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["a"])
    assert len(server.requests) == 1
    assert isinstance(info.value.last_error, ProviderError) and info.value.last_error.status == 400


@pytest.mark.parametrize(
    "body",
    [
        {"object": "list", "data": [{"index": 0, "embedding": [0.1, 0.2]}]},  # one vector for two inputs
        {"object": "list", "data": [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]},  # repeated
        {"object": "list", "data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["x"]}]},  # no number
        {"object": "list", "data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.2, 0.3]}]},  # sizes
    ],
    ids=["count", "repeated-index", "not-a-number", "mixed-sizes"],
)
async def test_malformed_answers_are_protocol_errors(body: dict[str, Any]) -> None:
    """An answer without one well-formed vector per input, all of one size, is a retryable protocol error."""
    async with upstream(orjson.dumps(body)) as (_, url), client("openai", f"{url}/v1", "text-embedding-3-small") as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["a", "b"])
    assert isinstance(info.value.last_error, ProtocolError)
    assert info.value.attempts[0].outcome == "retryable"


async def test_a_vector_of_another_size_than_asked_is_refused() -> None:
    """An upstream that ignores ``dimensions`` is caught: its answer is a protocol error, not a silent drop."""
    async with (
        upstream(fixture("openai_embedding.json")) as (_, url),
        client("openai", f"{url}/v1", "text-embedding-3-small") as c,
    ):
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["first text", "second text"], dimensions=256)
    assert isinstance(info.value.last_error, ProtocolError)


@pytest.mark.parametrize(
    ("family", "uri", "options", "words"),
    [
        ("gemini", "/v1beta", {"user": "u1"}, "does not take user"),
        ("gemini", "/v1beta", {"inputs": [[1, 2]]}, "does not take token arrays"),
        ("ollama", "", {"user": "u1"}, "does not take user"),
        ("anthropic", "", {}, "serves no embeddings"),
    ],
)
async def test_parameters_a_target_does_not_take_are_refused_before_any_attempt(
    family: str, uri: str, options: dict[str, Any], words: str
) -> None:
    """A parameter the first entry's protocol cannot carry is the caller's error, and nothing is sent."""
    inputs = options.pop("inputs", ["a text"])
    async with upstream(fixture("ollama_embed.json")) as (server, url), client(family, f"{url}{uri}", "m-1") as c:
        with pytest.raises(UnsupportedRequest, match=words):
            await c.embed(inputs, **options)
    assert server.requests == []
