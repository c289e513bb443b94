"""Bedrock's and Vertex AI's embedding wires: the requests they send and the documented answers they read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from provider_kit import RecordingServer, Reply, make_adapter

from servers import loopback_app
from turnout import Client
from turnout.config import load_config_dict
from turnout.core.embeddings import EmbedRequest
from turnout.core.errors import AllProvidersFailed, ErrorClass, UnsupportedRequest
from turnout.providers import HttpClient, build_adapter
from turnout.providers.bedrock import BedrockAdapter
from turnout.providers.vertex import VertexGeminiAdapter
from turnout.sim.aws import ACCESS_KEY, SECRET_KEY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"
TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class Upstream:
    """A loopback upstream answering every POST with one body, status and headers; it keeps what it was sent."""

    def __init__(self, body: bytes, status: int, headers: dict[str, str]) -> None:
        self.body, self.status, self.headers = body, status, headers
        self.requests: list[tuple[str, dict[str, str], Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.raw_path, dict(request.headers), orjson.loads(await request.read())))
        return web.Response(body=self.body, status=self.status, headers=self.headers, content_type="application/json")


@asynccontextmanager
async def upstream(
    body: bytes, status: int = 200, headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[Upstream, str]]:
    server = Upstream(body, status, headers or {})
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    async with loopback_app(app) as url:
        yield server, url


def bedrock(uri: str, model: str, **extra: Any) -> Client:
    """A Bedrock client on ``uri`` (SigV4-signed unless ``api_key`` is given), no retries."""
    profile = {"uri": uri, "region": "us-east-1", "model": model, **extra}
    return Client.from_dict(
        {
            "default_provider": "bedrock.main",
            "providers": {"models": {"bedrock": {"main": profile}}},
            "reliability": {"provider_retries": 0},
            "ledger": {"enabled": False},
        }
    )


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The simulator's AWS credentials in the environment, and no shared config files to read."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


# --- Bedrock: Titan Text Embeddings ------------------------------------------------------------------


async def test_titan_sends_one_signed_invoke_model_call_per_input(aws_env: None) -> None:
    """Titan V2: one ``inputText`` per InvokeModel call, ``normalize`` on, the model id escaped, SigV4-signed."""
    async with upstream(fixture("bedrock_titan_v2.json")) as (server, url), bedrock(url, TITAN) as c:
        reply = await c.embed(["first text", "second text", "third text"])
    assert reply.batches == 3 and len(server.requests) == 3
    paths = {path for path, _, _ in server.requests}
    assert paths == {"/model/amazon.titan-embed-text-v2%3A0/invoke"}
    assert sorted(body["inputText"] for _, _, body in server.requests) == ["first text", "second text", "third text"]
    assert all(body == {"inputText": body["inputText"], "normalize": True} for _, _, body in server.requests)
    assert all(
        h["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/") for _, h, _ in server.requests
    )
    assert reply.vectors[0] == [-0.10257928, 0.06417133, 0.01846917, -0.02876512, 0.04329741]
    assert reply.usage.input_tokens == 3 * 7  # inputTextTokenCount of each call


async def test_titan_takes_its_three_sizes_and_refuses_any_other() -> None:
    """``dimensions`` 256 is sent as Titan's ``dimensions``; 300 is refused before anything is sent."""
    answer = orjson.loads(fixture("bedrock_titan_v2.json"))
    answer["embedding"] = [0.0625] * 256
    async with (
        upstream(orjson.dumps(answer)) as (server, url),
        bedrock(url, TITAN, api_key="bedrock-api-key-0001") as c,
    ):
        reply = await c.embed("one text", dimensions=256)
        with pytest.raises(UnsupportedRequest, match="256, 512 or 1024 dimensions only, not 300"):
            await c.embed("one text", dimensions=300)
    assert len(server.requests) == 1
    _, headers, body = server.requests[0]
    assert body == {"inputText": "one text", "normalize": True, "dimensions": 256}
    assert headers["Authorization"] == "Bearer bedrock-api-key-0001"
    assert len(reply.vectors[0]) == 256


async def test_titan_g1_sends_input_text_alone() -> None:
    """Titan G1 (``amazon.titan-embed-text-v1``) takes ``inputText`` alone, and only its own size."""
    async with (
        upstream(fixture("bedrock_titan_v2.json")) as (server, url),
        bedrock(url, "amazon.titan-embed-text-v1", api_key="bedrock-api-key-0001") as c,
    ):
        await c.embed("one text")
        with pytest.raises(UnsupportedRequest, match="1536 dimensions only"):
            await c.embed("one text", dimensions=256)
    assert [body for _, _, body in server.requests] == [{"inputText": "one text"}]


# --- Bedrock: Cohere Embed v3 ------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["bedrock_cohere_v3.json", "bedrock_cohere_v3_by_type.json"])
async def test_cohere_sends_texts_and_reads_either_answer_and_the_token_header(answer: str) -> None:
    """Cohere v3: ``texts``, ``search_document``, ``truncate: NONE``, float vectors; usage from Bedrock's header."""
    headers = {"X-Amzn-Bedrock-Input-Token-Count": "9", "X-Amzn-Bedrock-Output-Token-Count": "0"}
    async with (
        upstream(fixture(answer), headers=headers) as (server, url),
        bedrock(url, COHERE, api_key="bedrock-api-key-0001") as c,
    ):
        reply = await c.embed(["first text", "second text"])
    path, _, body = server.requests[0]
    assert path == "/model/cohere.embed-english-v3/invoke"
    assert body == {
        "texts": ["first text", "second text"],
        "input_type": "search_document",
        "truncate": "NONE",
        "embedding_types": ["float"],
    }
    assert [v[0] for v in reply.vectors] == [0.02784729, -0.00534821]
    assert reply.usage.input_tokens == 9


async def test_cohere_refuses_a_size_other_than_its_own() -> None:
    """Cohere v3 makes 1,024 numbers only: 512 is refused before anything is sent; 1024 is taken and not sent."""
    answer = orjson.loads(fixture("bedrock_cohere_v3.json"))
    answer["embeddings"] = [[0.03125] * 1024, [-0.03125] * 1024]
    async with (
        upstream(orjson.dumps(answer)) as (server, url),
        bedrock(url, "cohere.embed-multilingual-v3", api_key="bedrock-api-key-0001") as c,
    ):
        with pytest.raises(UnsupportedRequest, match="1024 dimensions only, not 512"):
            await c.embed(["first text", "second text"], dimensions=512)
        assert server.requests == []
        reply = await c.embed(["first text", "second text"], dimensions=1024)
    assert "dimensions" not in server.requests[0][2] and reply.dimensions == 1024


async def test_a_bedrock_header_count_out_of_range_is_not_believed() -> None:
    """A token header that is no whole number in range is ignored: the batch's estimate is billed instead."""
    headers = {"X-Amzn-Bedrock-Input-Token-Count": "99999999999999999999999"}
    async with (
        upstream(fixture("bedrock_cohere_v3.json"), headers=headers) as (_, url),
        bedrock(url, COHERE, api_key="bedrock-api-key-0001") as c,
    ):
        reply = await c.embed(["first text", "second text"])
    assert reply.usage.input_tokens == 4 + 4  # 10 and 11 bytes at 3 a token, rounded up


async def test_a_bedrock_model_without_an_embedding_body_is_refused() -> None:
    """A Converse model (Claude) has no InvokeModel embedding body: refused before any request."""
    async with (
        upstream(fixture("bedrock_cohere_v3.json")) as (server, url),
        bedrock(url, "anthropic.claude-3-5-sonnet-20240620-v1:0", api_key="bedrock-api-key-0001") as c,
    ):
        with pytest.raises(UnsupportedRequest, match="serves no embeddings"):
            await c.embed("a text")
    assert server.requests == []


async def test_a_bedrock_validation_error_is_not_retried() -> None:
    """Bedrock's ``ValidationException`` 400 is a client error: one attempt, classified non-retryable."""
    headers = {"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    async with (
        upstream(fixture("bedrock_error_validation.json"), 400, headers) as (server, url),
        bedrock(url, COHERE, api_key="bedrock-api-key-0001") as c,
    ):
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["a", "b"])
    assert len(server.requests) == 1
    assert info.value.attempts[0].outcome == ErrorClass.NON_RETRYABLE.value
    assert info.value.attempts[0].status == 400


# --- Vertex AI: predict -------------------------------------------------------------------------------


class FakeTokens:
    """A token source that always hands out ``tok-1``."""

    def cached(self) -> str | None:
        return "tok-1"

    async def token(self) -> str:
        return "tok-1"

    async def renew(self, rejected: str) -> str:
        return "tok-2"


def vertex(http: HttpClient, uri: str, model: str) -> VertexGeminiAdapter:
    fields = {"project": "sim-project", "region": "us-central1", "model": model, "uri": uri}
    cfg = load_config_dict({"providers": {"models": {"vertex": {"test": fields}}}}, env={})
    adapter = build_adapter("vertex.test", cfg.profiles()["vertex.test"], http, None)
    assert isinstance(adapter, VertexGeminiAdapter)
    adapter.tokens = FakeTokens()  # type: ignore[assignment]
    return adapter


async def test_vertex_predict_sends_instances_and_output_dimensionality(http: HttpClient) -> None:
    """``:predict`` with one instance per input and ``dimensions`` as ``outputDimensionality``; token counts summed."""
    async with upstream(fixture("vertex_predict.json")) as (server, url):
        adapter = vertex(http, url, "text-embedding-005")
        request = EmbedRequest(inputs=("first text", "second text"), dimensions=5)
        answer = await adapter.embed(request, "text-embedding-005")
    path, headers, body = server.requests[0]
    assert path == (
        "/v1/projects/sim-project/locations/us-central1/publishers/google/models/text-embedding-005:predict"
    )
    assert headers["Authorization"] == "Bearer tok-1"
    assert body == {
        "instances": [{"content": "first text"}, {"content": "second text"}],
        "parameters": {"outputDimensionality": 5},
    }
    assert [v[0] for v in answer.vectors] == [-0.03162427, 0.01173954]
    assert answer.usage is not None and answer.usage.input_tokens == 4 + 5  # 5.0, a protobuf number, counts as 5


def test_vertex_batch_caps_follow_googles_limits(http: HttpClient) -> None:
    """250 instances and 20,000 tokens a request; ``gemini-embedding-001`` one instance (sent several at once)."""
    adapter = vertex(http, "http://127.0.0.1:9", "text-embedding-005")
    five = adapter.embedding_limits("text-embedding-005")
    gemini = adapter.embedding_limits("gemini-embedding-001")
    assert five is not None and (five.max_inputs, five.max_tokens, five.parallel) == (250, 20_000, 1)
    assert gemini is not None and (gemini.max_inputs, gemini.parallel) == (1, 8)
    assert (
        adapter.embedding_wire_for("text-embedding-005")
        .url("text-embedding-005", 2)
        .endswith(  # type: ignore[union-attr]
            "/publishers/google/models/text-embedding-005:predict"
        )
    )


async def test_an_expired_aws_credential_is_resolved_anew_for_an_embedding_call(
    http: HttpClient, server: RecordingServer, aws_env: None
) -> None:
    """A 403 ExpiredTokenException to InvokeModel drops the kept credentials; the call is made once more."""
    expired = Reply(
        status=403,
        headers={"Content-Type": "application/json", "x-amzn-ErrorType": "ExpiredTokenException"},
        pieces=(b'{"message":"The security token included in the request is expired"}',),
    )
    server.reply(expired, Reply(pieces=(fixture("bedrock_titan_v2.json"),)))
    adapter = make_adapter(http, "bedrock", server.url, api_key=None, region="us-east-1")
    assert isinstance(adapter, BedrockAdapter) and adapter.aws is not None
    answer = await adapter.embed(EmbedRequest(inputs=("one text",)), TITAN)
    assert len(answer.vectors) == 1 and len(server.requests) == 2
    assert all(r.headers["authorization"].startswith("AWS4-HMAC-SHA256") for r in server.requests)
