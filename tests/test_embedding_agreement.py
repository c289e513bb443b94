"""Embedding answers that agree: one vector length across a call's batches, and only finite float32 values.

The upstream is an OpenAI-compatible ``/v1/embeddings`` on loopback, scripted per API key (one key per profile):
each request takes the script's next step (a vector length, a status, or a raw body), the last step repeating.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from turnout import Client, Environment
from turnout.core.errors import AllProvidersFailed, ProviderError
from turnout.gateway import Gateway, GatewayServer
from turnout.providers.embedding import CohereEmbeddings, OpenAIEmbeddings

MODEL = "text-embedding-3-small"
GATEWAY_KEY = "gw-agreement-key-1"
#: One more input than OpenAI's 2,048 a request: two batches (2,048 and 1).
TEXTS = [f"passage {i}" for i in range(2049)]

Step = int | str | bytes  # a vector length, "status:<code>", or a raw JSON body


async def instant(seconds: float) -> None:
    """Backoffs take no time."""


@dataclass
class Upstream:
    """The scripted embeddings endpoint; :attr:`seen` lists ``(key, inputs)`` of each request in order."""

    scripts: dict[str, list[Step]] = field(default_factory=dict)
    seen: list[tuple[str, int]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        key = request.headers["Authorization"].removeprefix("Bearer ")
        body = await request.json()
        count = len(body["input"])
        script = self.scripts[key]
        step = script.pop(0) if len(script) > 1 else script[0]
        self.seen.append((key, count))
        if isinstance(step, bytes):
            return web.Response(body=step, content_type="application/json")
        if isinstance(step, str):
            return web.json_response({"error": {"message": "down", "type": "server_error"}}, status=int(step[7:]))
        data = [
            {"object": "embedding", "index": i, "embedding": [round(0.001 * (i % 97), 3)] * step} for i in range(count)
        ]
        return web.json_response(
            {"object": "list", "data": data, "model": MODEL, "usage": {"prompt_tokens": count, "total_tokens": count}}
        )


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", up.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield up
    finally:
        await runner.cleanup()


def client(up: Upstream, scripts: dict[str, list[Step]], **options: Any) -> Client:
    """Profiles ``openai.<name>`` (key ``sk-<name>-key``) in the scripts' order, each falling back to the next."""
    names = list(scripts)
    models: dict[str, Any] = {}
    for n, name in enumerate(names):
        up.scripts[f"sk-{name}-key"] = list(scripts[name])
        table: dict[str, Any] = {"uri": up.url, "api_key": f"sk-{name}-key", "model": MODEL}
        if n + 1 < len(names):
            table["fallback"] = [f"openai.{names[n + 1]}"]
        models[name] = table
    config = {
        "default_provider": f"openai.{names[0]}",
        "providers": {"models": {"openai": models}},
        "reliability": {"provider_retries": 1},
        "ledger": {"enabled": False},
        "gateway": {"api_keys": [GATEWAY_KEY]},
    }
    return Client.from_dict(config, env=Environment(sleep=instant), **options)


async def test_batches_answering_different_lengths_are_a_classified_failure(upstream: Upstream) -> None:
    """2,049 inputs without ``dimensions``: the second batch's vectors of another length fail the call with a
    non-retryable provider error (the entry is not asked again), never a reply mixing lengths.
    """
    async with client(upstream, {"a": [8, 9]}) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.embed(TEXTS)
    attempts = info.value.attempts
    assert len(attempts) == 2 and attempts[0].outcome == "ok"
    assert attempts[1].outcome == "non_retryable" and attempts[1].detail == "protocol_error"
    last = info.value.last_error
    assert isinstance(last, ProviderError) and last.error_type == "embedding_length_mismatch"
    assert "9 dimensions" in str(last) and "earlier batches 8" in str(last)
    assert upstream.seen == [("sk-a-key", 2048), ("sk-a-key", 1)]


async def test_a_batch_of_another_length_moves_to_the_next_entry_of_the_space(upstream: Upstream) -> None:
    """The first batch (8 numbers) sets the call's length: a later batch of 9 goes to the next entry, whose
    answer of 8 is kept with the first batch's vectors.
    """
    async with client(upstream, {"a": [8, 9], "b": [8]}) as c:
        reply = await c.embed(TEXTS)
    assert len(reply.vectors) == 2049 and {len(v) for v in reply.vectors} == {8}
    assert [(a.provider, a.outcome == "ok") for a in reply.attempts] == [
        ("openai.a", True),
        ("openai.a", False),
        ("openai.b", True),
    ]
    assert upstream.seen == [("sk-a-key", 2048), ("sk-a-key", 1), ("sk-b-key", 1)]


async def gateway_post(c: Client, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``/v1/embeddings`` to a gateway over ``c``: the status and the decoded JSON."""
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}"}
    async with (
        GatewayServer(Gateway(c, owns_client=True)) as server,
        aiohttp.ClientSession() as session,
        session.post(f"{server.url}/v1/embeddings", json=body, headers=headers) as resp,
    ):
        return resp.status, orjson.loads(await resp.read())


async def test_the_gateway_answers_no_vectors_of_mixed_lengths(upstream: Upstream) -> None:
    """``POST /v1/embeddings`` of 2,049 inputs whose batches answer 8 and 9 numbers is an upstream error, not a 200."""
    status, answer = await gateway_post(client(upstream, {"a": [8, 9]}), {"model": "", "input": TEXTS})
    assert status == 502 and "data" not in answer


@pytest.mark.parametrize("number", [b"1e308", b"-3.5e38", b"1e999"])
async def test_a_value_beyond_float32_is_a_provider_error_never_inf_in_base64(
    upstream: Upstream, number: bytes
) -> None:
    """An answer holding a number no float32 holds (1e308, -3.5e38, or JSON's 1e999) is a provider error: the
    gateway answers 502, never a base64 vector of ``inf``.
    """
    raw = b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,' + number + b"]}]}"
    status, answer = await gateway_post(
        client(upstream, {"a": [raw]}), {"model": "", "input": "one text", "encoding_format": "base64"}
    )
    assert status == 502 and "data" not in answer
    assert upstream.seen == [("sk-a-key", 1), ("sk-a-key", 1)]  # a protocol error: retried once, then failed


async def test_finite_float32_values_still_pass_through_base64(upstream: Upstream) -> None:
    """The largest float32 and ordinary values come back exactly as float32 base64 (the bound refuses nothing real)."""
    top = struct.unpack("<f", struct.pack("<f", 3.4028234663852886e38))[0]
    raw = orjson.dumps({"data": [{"index": 0, "embedding": [0.25, -top, 1]}], "usage": {"prompt_tokens": 2}})
    status, answer = await gateway_post(
        client(upstream, {"a": [raw]}), {"model": "", "input": "one text", "encoding_format": "base64"}
    )
    assert status == 200
    vector = struct.unpack("<3f", base64.b64decode(answer["data"][0]["embedding"]))
    assert vector == (0.25, -top, 1.0) and all(math.isfinite(x) for x in vector)


@pytest.mark.parametrize(
    "value",
    [math.inf, -math.inf, math.nan, 1e308 * 10, 1e308, 4e38, 10**400],
    ids=["inf", "-inf", "nan", "1e308*10", "1e308", "4e38", "10**400"],
)
def test_the_wires_refuse_a_non_finite_or_out_of_range_component(value: object) -> None:
    """Where an answer is parsed, a component that is infinite, NaN or beyond float32 is malformed (a
    ``ValueError``, which the request cycle makes a classified protocol error).
    """
    with pytest.raises(ValueError):
        OpenAIEmbeddings("http://127.0.0.1:9/v1").parse({"data": [{"index": 0, "embedding": [0.1, value]}]}, 1)
    with pytest.raises(ValueError):
        CohereEmbeddings(lambda model: None).parse({"embeddings": [[value, 0.2]]}, 1)  # type: ignore[arg-type,return-value]


def test_the_wires_still_refuse_what_is_not_a_number() -> None:
    """A string, a null or a nested list in a vector is still malformed (``TypeError``)."""
    wire = OpenAIEmbeddings("http://127.0.0.1:9/v1")
    for bad in ("0.1", None, [0.1]):
        with pytest.raises(TypeError):
            wire.parse({"data": [{"index": 0, "embedding": [0.1, bad]}]}, 1)
