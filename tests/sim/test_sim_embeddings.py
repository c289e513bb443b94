"""The simulator's embedding endpoints (OpenAI, Azure, Gemini, Ollama), decoded with raw aiohttp."""

from __future__ import annotations

import math
from typing import Any

import pytest

from turnout.sim.wire.embeddings import sim_vector


async def test_openai_embeddings_are_deterministic_unit_vectors_per_model(wire: Any) -> None:
    """The same (model, text) always gets the same unit vector; another model another one."""
    a = (await wire.post("/v1/embeddings", {"model": "emb-a", "input": ["hello", "world"]})).json()
    again = (await wire.post("/v1/embeddings", {"model": "emb-a", "input": "hello"})).json()
    b = (await wire.post("/v1/embeddings", {"model": "emb-b", "input": "hello"})).json()
    assert a["object"] == "list" and a["model"] == "emb-a"
    assert [d["index"] for d in a["data"]] == [0, 1]
    assert a["data"][0]["embedding"] == again["data"][0]["embedding"] != b["data"][0]["embedding"]
    vector = a["data"][0]["embedding"]
    assert len(vector) == 64 and math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-4)
    assert a["usage"] == {"prompt_tokens": 2, "total_tokens": 2}


async def test_known_models_have_their_own_size_and_dimensions_cut_it(wire: Any) -> None:
    """``text-embedding-3-small`` is 1536 long; ``dimensions`` asks for fewer, and more than its own is a 400."""
    full = (await wire.post("/v1/embeddings", {"model": "text-embedding-3-small", "input": "x"})).json()
    cut = (await wire.post("/v1/embeddings", {"model": "text-embedding-3-small", "input": "x", "dimensions": 8})).json()
    over = await wire.post("/v1/embeddings", {"model": "text-embedding-3-small", "input": "x", "dimensions": 4096})
    assert len(full["data"][0]["embedding"]) == 1536
    assert cut["data"][0]["embedding"] == sim_vector("text-embedding-3-small", "x", 8)
    assert over.status == 400 and "dimensions" in over.json()["error"]["message"]


async def test_azure_embeddings_take_the_deployment_as_the_model(wire: Any) -> None:
    """Azure's ``/openai/deployments/{deployment}/embeddings`` embeds with the deployment's name as the model."""
    r = await wire.post("/openai/deployments/emb-east/embeddings?api-version=2024-10-21", {"input": ["x"]})
    assert r.json()["data"][0]["embedding"] == sim_vector("emb-east", "x", 64)


async def test_gemini_embed_content_and_batch(wire: Any) -> None:
    """``:embedContent`` answers one ``embedding``; ``:batchEmbedContents`` one per request; no usage."""
    one = await wire.post(
        "/v1beta/models/emb-g:embedContent", {"content": {"parts": [{"text": "x"}]}, "outputDimensionality": 3}
    )
    requests = [{"model": "models/emb-g", "content": {"parts": [{"text": t}]}} for t in ("x", "y")]
    batch = await wire.post("/v1beta/models/emb-g:batchEmbedContents", {"requests": requests})
    assert one.json() == {"embedding": {"values": sim_vector("emb-g", "x", 3)}}
    assert batch.json() == {"embeddings": [{"values": sim_vector("emb-g", t, 64)} for t in ("x", "y")]}


@pytest.mark.parametrize(
    "body",
    [
        {"requests": [{"model": "models/other", "content": {"parts": [{"text": "x"}]}}]},
        {"requests": [{"model": "models/emb-g", "content": {"parts": [{"text": "x"}]}}] * 101},
        {"requests": [{"model": "models/emb-g", "content": "not an object"}]},
    ],
    ids=["another-model", "over-100", "malformed"],
)
async def test_gemini_refuses_a_batch_it_would_refuse(wire: Any, body: dict[str, Any]) -> None:
    """A batch naming another model, over 100 requests or malformed is a 400 in Gemini's error shape."""
    r = await wire.post("/v1beta/models/emb-g:batchEmbedContents", body)
    assert r.status == 400
    assert r.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_ollama_embed(wire: Any) -> None:
    """Ollama's ``/api/embed`` answers ``embeddings`` and ``prompt_eval_count``."""
    r = (await wire.post("/api/embed", {"model": "nomic-embed-text", "input": ["a b", "c"], "dimensions": 5})).json()
    assert r["embeddings"] == [sim_vector("nomic-embed-text", t, 5) for t in ("a b", "c")]
    assert r["prompt_eval_count"] == 3


async def test_scripted_faults_apply_to_embeddings(wire: Any, sim: Any) -> None:
    """A model's script makes its embedding answers fail like its chats (here a 429 with Retry-After)."""
    sim.set_script({"models": {"emb-f": {"steps": ["429-ra2", "ok"]}}})
    first = await wire.post("/v1/embeddings", {"model": "emb-f", "input": "x"})
    second = await wire.post("/v1/embeddings", {"model": "emb-f", "input": "x"})
    assert (first.status, first.headers["retry-after"]) == (429, "2")
    assert second.status == 200
    assert [e.outcome for e in sim.log] == ["status:429", "ok"]
