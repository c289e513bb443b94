"""Embeddings on Bedrock (Titan, Cohere) and Vertex AI against the simulator: batches, order, failover, one space."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from google_creds import service_account_file
from turnout import Client, Environment
from turnout.cli.main import app
from turnout.core.errors import AllProvidersFailed
from turnout.sim import Simulator
from turnout.sim.aws import ACCESS_KEY, SECRET_KEY
from turnout.sim.wire.embeddings import sim_vector

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"
TEXTS = [f"passage {i} on points and crossings" for i in range(200)]


async def instant(seconds: float) -> None:
    """Backoffs take no time."""


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(sleep=instant) as simulator:
        yield simulator


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The simulator's AWS credentials in the environment (requests are SigV4-signed), no shared files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    for name in ("AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


def client(profiles: dict[str, dict[str, Any]], retries: int = 1) -> Client:
    models: dict[str, dict[str, Any]] = {}
    for name, table in profiles.items():
        family, _, alias = name.partition(".")
        models.setdefault(family, {})[alias] = table
    config = {
        "default_provider": next(iter(profiles)),
        "providers": {"models": models},
        "reliability": {"provider_retries": retries},
        "ledger": {"enabled": False},
    }
    return Client.from_dict(config, env=Environment(sleep=instant))


def bedrock(sim: Simulator, model: str, region: str = "us-east-1", **extra: Any) -> dict[str, Any]:
    return {"uri": sim.url, "region": region, "model": model, **extra}


def in_flight(sim: Simulator) -> int:
    """The most requests the simulator was answering at once (from its log's start times and durations)."""
    spans = [(e.time, e.time + (e.duration or 0.0)) for e in sim.log]
    return max(sum(1 for s, t in spans if s <= start < t) for start, _ in spans)


async def test_titan_sends_each_input_alone_several_at_once_and_keeps_the_order(aws_env: None) -> None:
    """20 inputs: 20 signed InvokeModel calls, at most 8 in flight (more than one), vectors in input order."""
    async with Simulator() as slow:  # real sleeps: each answer takes 20 ms, so calls in flight overlap
        slow.set_script({"models": {TITAN: {"steps": [{"do": "slow", "delay": 0.02}], "after_last": "repeat"}}})
        async with client({"bedrock.east": bedrock(slow, TITAN)}) as c:
            reply = await c.embed(TEXTS[:20], dimensions=512)
        assert reply.batches == 20 and len(slow.log) == 20
        assert list(reply.vectors) == [sim_vector(TITAN, t, 512) for t in TEXTS[:20]]
        assert 1 < in_flight(slow) <= 8
        assert all(e.key_id is not None and e.outcome == "ok" for e in slow.log)  # signed with the access key
        assert reply.usage.input_tokens == sum(len(t.split()) for t in TEXTS[:20])  # inputTextTokenCount


async def test_cohere_batches_96_texts_and_counts_the_header_tokens(sim: Simulator) -> None:
    """200 inputs: batches of 96, 96 and 8, reassembled in order; usage from Bedrock's token-count header."""
    async with client({"bedrock.main": bedrock(sim, COHERE, api_key="bedrock-api-key-0001")}) as c:
        reply = await c.embed(TEXTS)
    assert reply.batches == 3
    assert [e.path for e in sim.log] == ["/model/cohere.embed-english-v3/invoke"] * 3
    assert list(reply.vectors) == [sim_vector(COHERE, t, 1024) for t in TEXTS]
    assert reply.usage.input_tokens == sum(len(t.split()) for t in TEXTS)


async def test_a_failed_titan_call_fails_over_to_the_same_model_in_another_region(aws_env: None) -> None:
    """us-east-1 throttles every call; the same Titan model in us-west-2 serves: the same vector space."""
    async with Simulator(sleep=instant) as east, Simulator(sleep=instant) as west:
        east.set_script({"models": {TITAN: {"steps": [{"do": "status", "status": 429}], "after_last": "repeat"}}})
        profiles = {
            "bedrock.east": bedrock(east, TITAN, fallback=["bedrock.cohere", "bedrock.west"]),
            "bedrock.cohere": bedrock(east, COHERE),
            "bedrock.west": bedrock(west, TITAN, region="us-west-2"),
        }
        async with client(profiles, retries=0) as c:
            reply = await c.embed(["first text", "second text"])
    assert reply.served.provider == "bedrock.west" and reply.fallback is not None
    assert list(reply.vectors) == [sim_vector(TITAN, t, 1024) for t in ("first text", "second text")]
    assert {e.model for e in east.log} == {TITAN}  # the Cohere entry, another space, was never tried
    assert [e.outcome for e in east.log] == ["status:429", "status:429"]
    assert sorted(a.provider for a in reply.attempts) == [
        "bedrock.east",
        "bedrock.east",
        "bedrock.west",
        "bedrock.west",
    ]


async def test_a_fallback_from_titan_to_another_model_is_never_taken(sim: Simulator) -> None:
    """Titan fails; its only fallback is Cohere (another space): the call fails and Cohere is never asked."""
    sim.set_script({"models": {TITAN: {"steps": [{"do": "status", "status": 503}], "after_last": "repeat"}}})
    profiles = {
        "bedrock.titan": bedrock(sim, TITAN, api_key="bedrock-api-key-0001", fallback=["bedrock.cohere"]),
        "bedrock.cohere": bedrock(sim, COHERE, api_key="bedrock-api-key-0001"),
    }
    async with client(profiles, retries=0) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed("one text")
    assert {a.provider for a in info.value.attempts} == {"bedrock.titan"}
    assert {e.model for e in sim.log} == {TITAN}


async def test_a_failed_titan_input_is_retried_alone(sim: Simulator) -> None:
    """One of five single-input calls fails once: only that input is sent again."""
    steps = [{"do": "ok"}, {"do": "ok"}, {"do": "status", "status": 500}, {"do": "ok"}]
    sim.set_script({"models": {TITAN: {"steps": steps, "after_last": "repeat"}}})
    async with client({"bedrock.main": bedrock(sim, TITAN, api_key="bedrock-api-key-0001")}) as c:
        reply = await c.embed(TEXTS[:5])
    assert len(sim.log) == 6
    assert sorted(a.outcome for a in reply.attempts) == ["ok"] * 5 + ["retryable"]
    assert list(reply.vectors) == [sim_vector(TITAN, t, 1024) for t in TEXTS[:5]]


async def test_a_titan_input_refused_everywhere_ends_the_call(sim: Simulator) -> None:
    """A batch that fails on every entry of the space ends the call: no batch is started after it."""
    steps = [{"do": "ok"}] * 3 + [{"do": "status", "status": 400}]
    sim.set_script({"models": {TITAN: {"steps": steps, "after_last": "repeat"}}})
    async with client({"bedrock.main": bedrock(sim, TITAN, api_key="bedrock-api-key-0001")}) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(TEXTS[:40])
    assert {a.status for a in info.value.attempts if a.outcome != "ok"} == {400}
    assert len(sim.log) < 40  # the calls in flight when it failed may end; none is started after


# --- Vertex AI ------------------------------------------------------------------------------------


def vertex(sim: Simulator, tmp_path: Path, model: str, **extra: Any) -> dict[str, Any]:
    credentials = service_account_file(tmp_path, sim.google_token_uri)
    return {
        "uri": sim.url,
        "project": "sim-project",
        "region": "us-central1",
        "model": model,
        "credentials_file": str(credentials),
        **extra,
    }


async def test_vertex_text_embedding_batches_250_with_output_dimensionality(sim: Simulator, tmp_path: Path) -> None:
    """300 inputs to ``text-embedding-005``: two ``:predict`` calls (250 and 50), ``dimensions`` mapped, in order."""
    texts = [f"t{i} {i}" for i in range(300)]
    async with client({"vertex.main": vertex(sim, tmp_path, "text-embedding-005")}) as c:
        reply = await c.embed(texts, dimensions=16)
    assert reply.batches == 2
    assert [e.path.rpartition("/")[2] for e in sim.log] == ["text-embedding-005:predict"] * 2
    assert list(reply.vectors) == [sim_vector("text-embedding-005", t, 16) for t in texts]
    assert reply.usage.input_tokens == 600  # each prediction's statistics.token_count, summed


async def test_vertex_gemini_embedding_takes_one_instance_a_call(sim: Simulator, tmp_path: Path) -> None:
    """``gemini-embedding-001`` on Vertex: one instance per ``:predict`` call."""
    async with client({"vertex.main": vertex(sim, tmp_path, "gemini-embedding-001")}) as c:
        reply = await c.embed(["a text", "another text", "a third text"])
    assert reply.batches == 3 and len(sim.log) == 3
    assert list(reply.vectors) == [
        sim_vector("gemini-embedding-001", t, 3072) for t in ["a text", "another text", "a third text"]
    ]


async def test_vertex_renews_an_expired_token_for_embeddings(sim: Simulator, tmp_path: Path) -> None:
    """A token the endpoint expired gets a 401; the token is renewed once and the call made again."""
    async with client({"vertex.main": vertex(sim, tmp_path, "text-embedding-005")}, retries=0) as c:
        await c.embed("first")
        sim.google.expire()
        reply = await c.embed("second")
    assert [e.outcome for e in sim.log] == ["ok", "status:401", "ok"]
    assert reply.vectors[0] == sim_vector("text-embedding-005", "second", 768)


async def test_vertex_fails_over_to_the_same_model_on_the_gemini_api(sim: Simulator, tmp_path: Path) -> None:
    """Vertex's ``text-embedding-005`` fails: the fallback to another model is skipped, the Gemini API's serves."""
    sim.set_script({"models": {"text-embedding-005": {"steps": [{"do": "status", "status": 503}, {"do": "ok"}]}}})
    profiles = {
        "vertex.main": vertex(sim, tmp_path, "text-embedding-005", fallback=["vertex.other", "gemini.api"]),
        "vertex.other": vertex(sim, tmp_path, "text-embedding-004"),
        "gemini.api": {"uri": sim.base_url("gemini"), "api_key": "sk-gemini", "model": "text-embedding-005"},
    }
    async with client(profiles, retries=0) as c:
        reply = await c.embed(["one", "two"])
    assert reply.served.provider == "gemini.api"
    assert "text-embedding-004" not in {e.model for e in sim.log}
    assert list(reply.vectors) == [sim_vector("text-embedding-005", t, 768) for t in ("one", "two")]


BEDROCK_CHECK = """
default_provider = "bedrock.east"
[providers.models.bedrock.east]
region = "us-east-1"
api_key = "bedrock-key"
model = "amazon.titan-embed-text-v2:0"
fallback = ["bedrock.cohere", "bedrock.west", "vertex.g"]
[providers.models.bedrock.cohere]
region = "us-east-1"
api_key = "bedrock-key"
model = "cohere.embed-english-v3"
[providers.models.bedrock.west]
region = "us-west-2"
api_key = "bedrock-key"
model = "amazon.titan-embed-text-v2:0"
[providers.models.vertex.g]
project = "p"
region = "us-central1"
model = "text-embedding-005"
"""


def test_turnout_check_says_a_bedrock_route_keeps_to_titan(tmp_path: Path) -> None:
    """``turnout check``: Titan's fallbacks to Cohere and Vertex are skipped; Titan in another region serves."""
    path = tmp_path / "turnout.toml"
    path.write_text(BEDROCK_CHECK, encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index(f"embeddings via default: bedrock.east: one vector space, {TITAN}")
    assert lines[start + 1 :] == [
        f"  entry 2 (bedrock.cohere/{COHERE}) is skipped: another vector space than {TITAN}",
        f"  entry 4 (vertex.g/text-embedding-005) is skipped: another vector space than {TITAN}",
    ]
