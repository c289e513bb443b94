"""Embedding calls through the reliable walk, against the simulator: one vector space, batches, partial retries."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from turnout import Client, Environment
from turnout.cli.demo import Tour, _steps, demo_config
from turnout.cli.main import app
from turnout.core.embeddings import batches, embed_request, estimated_tokens, space_of
from turnout.core.errors import AllProvidersFailed, ConfigError, ContextWindowExceeded, InvalidRequest
from turnout.core.types import Usage
from turnout.ledger.pricing import Catalogue
from turnout.sim import Simulator
from turnout.sim.wire.embeddings import sim_vector

TEXTS = [f"document number {i} about vector spaces" for i in range(250)]


async def instant(seconds: float) -> None:
    """Backoffs take no time."""


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(sleep=instant) as simulator:
        yield simulator


def profile(sim: Simulator, protocol: str, model: str, **extra: Any) -> dict[str, Any]:
    """A profile of ``protocol`` on the simulator."""
    out: dict[str, Any] = {"uri": sim.base_url(protocol, deployment=model), "model": model, **extra}  # type: ignore[arg-type]
    if protocol != "ollama":
        out.setdefault("api_key", f"sk-{protocol}-{model}")
    if protocol == "azure":
        out.update(deployment=model, resource="unused")
    return out


def client(profiles: dict[str, dict[str, Any]], **top: Any) -> Client:
    """A client whose default is the first profile (``family.alias`` keys), no ledger, one retry, instant sleeps."""
    models: dict[str, dict[str, Any]] = {}
    for name, table in profiles.items():
        family, _, alias = name.partition(".")
        models.setdefault(family, {})[alias] = table
    config = {
        "default_provider": next(iter(profiles)),
        "providers": {"models": models},
        "reliability": {"provider_retries": 1},
        "ledger": {"enabled": False},
        **top,
    }
    return Client.from_dict(config, env=Environment(sleep=instant))


def paths(sim: Simulator) -> list[tuple[str, str]]:
    return [(e.model, e.outcome) for e in sim.log]


async def test_a_fallback_to_another_model_is_never_taken(sim: Simulator) -> None:
    """The primary fails; its fallback serves another embedding model, so the call fails without trying it."""
    sim.set_script({"models": {"emb-a": {"steps": [{"do": "status", "status": 503}]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-a", fallback=["openai.b"]),
        "openai.b": profile(sim, "openai", "emb-b"),
    }
    async with client(profiles) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(["one text"])
        chat = await c.chat("hi")  # the same route serves a chat from the fallback: only embeddings keep to a space
    assert [a.provider for a in info.value.attempts] == ["openai.a", "openai.a"]
    assert [m for m, _ in paths(sim)] == ["emb-a", "emb-a", "emb-a", "emb-a", "emb-b"]
    assert chat.served.model == "emb-b"


async def test_the_same_model_on_another_profile_serves_as_a_fallback(sim: Simulator) -> None:
    """A fallback with the same model (another cloud: Azure, under its own deployment name) takes over."""
    sim.set_script({"models": {"text-embedding-3-small": {"steps": [{"do": "status", "status": 500}]}}})
    azure = profile(sim, "azure", "text-embedding-3-small")
    azure.update(uri=sim.base_url("azure", deployment="emb-east"), deployment="emb-east")
    profiles = {
        "openai.a": profile(sim, "openai", "text-embedding-3-small", fallback=["openai.big", "azure.east"]),
        "openai.big": profile(sim, "openai", "text-embedding-3-large"),
        "azure.east": azure,
    }
    async with client(profiles, reliability={"provider_retries": 0}) as c:
        reply = await c.embed(["one text", "two texts"])
    assert reply.served.provider == "azure.east"
    assert reply.fallback is not None
    assert [a.provider for a in reply.attempts] == ["openai.a", "azure.east"]
    assert "text-embedding-3-large" not in [m for m, _ in paths(sim)]
    assert list(reply.vectors) == [sim_vector("emb-east", t, 64) for t in ("one text", "two texts")]


async def test_a_declared_space_lets_another_name_serve(sim: Simulator) -> None:
    """``[embeddings.spaces]`` declaring two names one space makes the other name an eligible fallback."""
    sim.set_script({"models": {"nomic-embed-text": {"steps": [{"do": "status", "status": 503}]}}})
    profiles = {
        "ollama.local": profile(sim, "ollama", "nomic-embed-text", fallback=["together.cloud"]),
        "together.cloud": profile(sim, "openai", "nomic-ai/nomic-embed-text-v1.5"),
    }
    spaces = {"embeddings": {"spaces": {"nomic-v1.5": ["nomic-embed-text", "nomic-ai/nomic-embed-text-v1.5"]}}}
    async with client(profiles, **spaces) as c:
        reply = await c.embed("a text")
    assert reply.served.provider == "together.cloud"


async def test_the_vectors_tell_models_apart(sim: Simulator) -> None:
    """Two models give one text different vectors, and one model always the same: spaces can be told apart."""
    async with client({"openai.a": profile(sim, "openai", "emb-a"), "openai.b": profile(sim, "openai", "emb-b")}) as c:
        a1 = await c.embed("the same text")
        a2 = await c.embed("the same text")
        b = await c.embed("the same text", provider="openai.b")
    assert a1.vectors == a2.vectors
    assert a1.vectors != b.vectors
    assert len(a1.vectors[0]) == 64


@pytest.mark.parametrize(
    ("protocol", "per_batch"),
    [("openai", 2048), ("gemini", 100), ("ollama", 512)],
)
async def test_large_inputs_are_split_to_the_cap_and_reassembled_in_order(
    sim: Simulator, protocol: str, per_batch: int
) -> None:
    """Inputs over a provider's cap go in batches of at most its cap, and the vectors come back in input order."""
    texts = [f"t{i}" for i in range(per_batch * 2 + 7)]
    async with client({f"{protocol}.main": profile(sim, protocol, "emb-x")}) as c:
        reply = await c.embed(texts, dimensions=4)
    assert reply.batches == 3
    assert len(sim.log) == 3
    assert list(reply.vectors) == [sim_vector("emb-x", t, 4) for t in texts]
    # one word each as the simulator counts; Gemini reports no usage, so its estimate is billed
    expected = sum(estimated_tokens(t) for t in texts) if protocol == "gemini" else len(texts)
    assert reply.usage.input_tokens == expected


async def test_a_failed_batch_is_retried_alone(sim: Simulator) -> None:
    """Batch 2 of 3 fails once: only it is sent again; the answered batches are kept, in order."""
    sim.set_script({"models": {"emb-g": {"steps": [{"do": "ok"}, {"do": "status", "status": 503}, {"do": "ok"}]}}})
    async with client({"gemini.main": profile(sim, "gemini", "emb-g")}) as c:
        reply = await c.embed(TEXTS)
    assert [outcome for _, outcome in paths(sim)] == ["ok", "status:503", "ok", "ok"]
    assert [a.outcome for a in reply.attempts] == ["ok", "retryable", "ok", "ok"]
    assert list(reply.vectors) == [sim_vector("emb-g", t, 64) for t in TEXTS]
    assert reply.fallback is None


async def test_a_failed_batch_fails_over_alone_within_the_space(sim: Simulator) -> None:
    """A batch that keeps failing on the primary moves to the same model on another key; the others stay put."""
    steps = [{"do": "ok"}, {"do": "status", "status": 500}, {"do": "status", "status": 500}, {"do": "ok"}]
    sim.set_script({"attempts_per": "model_key", "models": {"emb-g": {"steps": steps}}})
    profiles = {
        "gemini.a": profile(sim, "gemini", "emb-g", fallback=["gemini.b"]),
        "gemini.b": profile(sim, "gemini", "emb-g"),
    }
    async with client(profiles) as c:
        reply = await c.embed(TEXTS)
    assert [(a.provider, a.outcome) for a in reply.attempts] == [
        ("gemini.a", "ok"),
        ("gemini.a", "retryable"),
        ("gemini.a", "retryable"),
        ("gemini.b", "ok"),
        ("gemini.a", "ok"),
    ]
    assert reply.served.provider == "gemini.b" and reply.fallback is not None
    assert list(reply.vectors) == [sim_vector("emb-g", t, 64) for t in TEXTS]


@pytest.mark.parametrize("protocol", ["openai", "azure", "gemini", "ollama"])
async def test_dimensions_reach_every_protocol(sim: Simulator, protocol: str) -> None:
    """``dimensions`` is sent as each protocol names it, and the vectors have that size."""
    async with client({f"{protocol}.main": profile(sim, protocol, "text-embedding-3-small")}) as c:
        reply = await c.embed(["a", "b", "c"], dimensions=256)
    assert reply.dimensions == 256
    assert list(reply.vectors) == [sim_vector("text-embedding-3-small", t, 256) for t in ("a", "b", "c")]


async def test_a_rate_limited_profile_cools_down_for_embeddings_too(sim: Simulator) -> None:
    """A 429 cools the primary down; the next call skips it (``cooldown_skip``) for its same-space fallback."""
    sim.set_script({"attempts_per": "model_key", "models": {"emb-q": {"steps": ["429-ra5", "ok"]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-q", fallback=["openai.b"]),
        "openai.b": profile(sim, "openai", "emb-q"),
    }
    async with client(profiles) as c:
        first = await c.embed("x")
        second = await c.embed("y")
    assert [(a.provider, a.outcome) for a in first.attempts] == [("openai.a", "rate_limited"), ("openai.b", "ok")]
    assert [(a.provider, a.outcome) for a in second.attempts] == [("openai.a", "cooldown_skip"), ("openai.b", "ok")]


async def test_key_rotation_applies_to_embeddings(sim: Simulator) -> None:
    """A 429 on one key of a pool retries on the next key of the same profile."""
    sim.set_script({"models": {"emb-k": {"steps": ["429-ra1", "ok"]}}})
    table = profile(sim, "openai", "emb-k")
    table.pop("api_key")
    table["api_keys"] = ["sk-key-one", "sk-key-two"]
    async with client({"openai.a": table}) as c:
        reply = await c.embed("x")
    assert [a.outcome for a in reply.attempts] == ["rate_limited", "ok"]
    assert reply.attempts[0].key_id != reply.attempts[1].key_id


async def test_a_parameter_the_fallback_lacks_skips_the_fallback(sim: Simulator) -> None:
    """``user`` goes to OpenAI; an Ollama fallback of the same model cannot carry it and is skipped, not stripped."""
    sim.set_script({"models": {"emb-u": {"steps": [{"do": "status", "status": 503}]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-u", fallback=["ollama.b"]),
        "ollama.b": profile(sim, "ollama", "emb-u"),
    }
    async with client(profiles) as c:
        with pytest.raises(AllProvidersFailed):
            await c.embed("x", user="end-user-1")
    assert [e.protocol for e in sim.log] == ["openai", "openai"]


@pytest.mark.parametrize(
    ("inputs", "options"),
    [
        ([], {}),
        ([""], {}),
        (["a"], {"user": 5}),
        ([1.5], {}),
        (["a"], {"dimensions": 0}),
        (["a"], {"dimensions": True}),
        ([[]], {}),
    ],
    ids=[
        "no-input",
        "empty-text",
        "user-not-a-string",
        "float",
        "zero-dimensions",
        "bool-dimensions",
        "empty-token-array",
    ],
)
async def test_malformed_inputs_are_the_callers_error(
    sim: Simulator, inputs: list[Any], options: dict[str, Any]
) -> None:
    """Malformed inputs raise ``InvalidRequest`` before any attempt (nothing reaches the provider)."""
    async with client({"openai.a": profile(sim, "openai", "emb-a")}) as c:
        with pytest.raises(InvalidRequest):
            await c.embed(inputs, **options)
    assert sim.log == []


def test_batches_keep_to_the_input_and_token_caps() -> None:
    """Batches are consecutive, cover every input once, and respect both caps (a lone oversized input alone)."""
    sizes = [5, 5, 5, 20, 1, 1, 1]
    ranges = batches(len(sizes), sizes, 3, 12)
    assert [list(r) for r in ranges] == [[0, 1], [2], [3], [4, 5, 6]]
    assert [list(r) for r in batches(5, [], 2, None)] == [[0, 1], [2, 3], [4]]


def test_estimated_tokens_count_bytes_conservatively() -> None:
    """Text is counted at one token per 3 UTF-8 bytes (rounded up); a token array by its length."""
    assert estimated_tokens("abcdef") == 2
    assert estimated_tokens("日本") == 2
    assert estimated_tokens((1, 2, 3, 4)) == 4


def test_a_space_is_a_model_and_its_size() -> None:
    """``models/`` does not change a model; dimensions and a declared space do."""
    assert space_of("models/text-embedding-004", None, {}) == space_of("text-embedding-004", None, {})
    assert space_of("m", 256, {}) != space_of("m", 512, {})
    assert space_of("a", None, {"a": "s", "b": "s"}) == space_of("b", None, {"a": "s", "b": "s"})


def test_one_token_array_input_is_one_input() -> None:
    """A caller's list of lists of ints is several token arrays, a string is one text."""
    assert embed_request("one").inputs == ("one",)
    assert embed_request([[1, 2], [3]]).inputs == ((1, 2), (3,))


def test_a_model_in_two_spaces_is_a_config_error() -> None:
    """``[embeddings.spaces]`` naming one model in two spaces fails to load, naming the key path."""
    with pytest.raises(ConfigError) as info:
        Client.from_dict({"embeddings": {"spaces": {"a": ["m1"], "b": ["m1"]}}, "ledger": {"enabled": False}})
    assert info.value.path is not None and info.value.path.startswith("embeddings.spaces")


async def test_the_ledger_records_an_embedding_call(sim: Simulator, tmp_path: Path) -> None:
    """An embedding call is recorded as ``embed``, each batch's attempt with its input tokens and cost."""
    path = tmp_path / "ledger.sqlite3"
    profiles = {"openai.a": profile(sim, "openai", "text-embedding-3-small")}
    config = {
        "default_provider": "openai.a",
        "providers": {"models": {"openai": {"a": profiles["openai.a"]}}},
        "ledger": {"enabled": True, "path": str(path)},
    }
    async with Client.from_dict(config, env=Environment(sleep=instant)) as c:
        reply = await c.embed(["one two three", "four five"])
        await c.chat("hello")
    with sqlite3.connect(path) as db:
        calls = db.execute("SELECT call_id, operation, outcome, cost_usd FROM calls ORDER BY ts").fetchall()
        attempts = db.execute(
            "SELECT input_tokens, cost_usd, accepted FROM attempts WHERE call_id = ?", (reply.call_id,)
        ).fetchall()
    assert [(op, outcome) for _, op, outcome, _ in calls] == [("embed", "ok"), (None, "ok")]
    assert calls[0][3] == pytest.approx(5 * 0.02 / 1_000_000)
    assert attempts == [(5, pytest.approx(5 * 0.02 / 1_000_000), 1)]


async def test_an_input_too_long_for_the_model_is_a_context_window_error(sim: Simulator) -> None:
    """A too-long input ends the call as ``ContextWindowExceeded``: no same model again, no other space instead."""
    sim.set_script({"models": {"emb-c": {"steps": [{"do": "status", "error": "context_length", "limit": 8192}]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-c", fallback=["openai.big", "openai.b"]),
        "openai.big": profile(sim, "openai", "emb-big"),
        "openai.b": profile(sim, "openai", "emb-c"),
    }
    async with client(profiles) as c:
        with pytest.raises(ContextWindowExceeded):
            await c.embed("a very long text")
    assert len(sim.log) == 1


async def test_a_circuit_breaker_opened_by_embedding_failures_skips_the_entry(sim: Simulator) -> None:
    """Failures across embedding calls open the primary's breaker; the next call skips it (``breaker_skip``)."""
    sim.set_script({"attempts_per": "model_key", "models": {"emb-h": {"steps": [{"do": "status", "status": 503}]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-h", fallback=["openai.b"], api_key="sk-a"),
        "openai.b": profile(sim, "openai", "emb-b"),
    }
    spaces = {"spaces": {"h": ["emb-h", "emb-b"]}}
    breaker = {"provider_retries": 0, "breaker": {"failures": 2, "open_secs": 60}}
    async with client(profiles, embeddings=spaces, reliability=breaker) as c:
        await c.embed("one")
        await c.embed("two")
        third = await c.embed("three")
    assert [(a.provider, a.outcome) for a in third.attempts] == [("openai.a", "breaker_skip"), ("openai.b", "ok")]


CHECK_TOML = """
default_provider = "openai.main"
[providers.models.openai.main]
api_key = "sk-x"
model = "text-embedding-3-small"
fallback = ["azure.east", "openai.big", "anthropic.a"]
[providers.models.azure.east]
api_key = "sk-y"
resource = "r"
deployment = "emb"
model = "text-embedding-3-small"
[providers.models.openai.big]
api_key = "sk-x"
model = "text-embedding-3-large"
[providers.models.anthropic.a]
api_key = "sk-z"
model = "claude-haiku-4-5"
"""


def test_turnout_check_names_the_entries_an_embedding_call_skips(tmp_path: Path) -> None:
    """``turnout check`` says which fallbacks of an embedding route are skipped: another model, no embeddings."""
    path = tmp_path / "turnout.toml"
    path.write_text(CHECK_TOML, encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("embeddings via default: openai.main: one vector space, text-embedding-3-small")
    assert lines[start + 1 :] == [
        "  entry 3 (openai.big/text-embedding-3-large) is skipped: another vector space than text-embedding-3-small",
        "  entry 4 (anthropic.a/claude-haiku-4-5) is skipped: it serves no embeddings",
    ]


def test_turnout_check_says_nothing_of_embeddings_for_a_chat_route(tmp_path: Path) -> None:
    """A route whose first model is no embedding model gets no embedding lines."""
    path = tmp_path / "turnout.toml"
    path.write_text(CHECK_TOML.replace('model = "text-embedding-3-small"\nfallback', 'model = "gpt-4.1"\nfallback'))
    result = CliRunner().invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 0 and "embeddings via" not in result.output


def test_an_embedding_price_prices_embeddings_only() -> None:
    """A catalogue entry with an input price and no output price prices embeddings, never a chat (output free)."""
    catalogue = Catalogue()
    assert catalogue.rates("openai", "text-embedding-3-small") is None
    rates = catalogue.embedding_rates("openai", "text-embedding-3-small")
    assert rates is not None and rates.cost(Usage(input_tokens=1_000_000)) == pytest.approx(0.02)
    assert catalogue.rates("openai", "gpt-4.1") is not None


async def test_the_demo_embedding_tour_keeps_to_one_vector_space(tmp_path: Path) -> None:
    """The demo's embedding tour skips the other model's fallback and is served by the same model on Azure."""
    step = next(s for s in _steps() if isinstance(s, Tour) and "vector space" in s.title)
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator(sleep=instant) as simulator:
        simulator.set_script({"models": step.script})
        config = demo_config(simulator, tmp_path / "ledger.sqlite3")
        async with Client.from_toml(config, ledger=False, env=Environment(sleep=instant)) as c:
            told = await step.play(console, c, simulator)
    assert told
    assert "text-embedding-3-large" not in [e.model for e in simulator.log]
    assert "300 vectors of 32 numbers, in input order, served by azure.embed/text-embedding-3-small" in (
        console.export_text()
    )


async def test_every_entry_of_the_space_cooling_down_is_tried_as_if_closed(sim: Simulator) -> None:
    """When each entry of the space cools down, the embedding call still tries them (the panic rule)."""
    sim.set_script({"models": {"emb-p": {"steps": ["429-ra30", "429-ra30", "ok"]}}})
    profiles = {
        "openai.a": profile(sim, "openai", "emb-p", fallback=["openai.b"]),
        "openai.b": profile(sim, "openai", "emb-p"),
    }
    async with client(profiles, reliability={"provider_retries": 0}) as c:
        with pytest.raises(AllProvidersFailed):
            await c.embed("x")
        reply = await c.embed("x")
    assert [(a.provider, a.outcome) for a in reply.attempts] == [
        ("openai.a", "cooldown_skip"),
        ("openai.b", "cooldown_skip"),
        ("openai.a", "ok"),
    ]
