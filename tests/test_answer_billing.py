"""What an answer is billed when its provider's usage is missing, garbage or absurd: never $0, never a fantasy.

The rules (:func:`turnout.core.estimate.billed_usage`), then a gateway over a loopback upstream priced at $1,000 per
million tokens: a limited key whose answers carry no believable usage is still charged, and a usage of 1e30 tokens
costs what the request allowed at most.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from fakes import E, Scripted, walk
from servers import loopback_app
from turnout import Client
from turnout.core.attribution import DispatchScope
from turnout.core.errors import ProtocolError
from turnout.core.estimate import (
    DEFAULT_OUTPUT_BOUND,
    INPUT_ESTIMATE_FACTOR,
    INPUT_SLACK,
    billed_usage,
    embedding_usage,
    estimate_tokens,
    usage_ceiling,
)
from turnout.core.types import ChatRequest, ChatResponse, NativeRequest, TextDelta, Usage, UsageEvent, provider_count
from turnout.gateway import Gateway, GatewayServer
from turnout.providers.bedrock import normalise_usage as bedrock_usage

KEY = "tk-usage-bounds-0001"
ANSWER = "x" * 2_000  # 500 tokens by the estimate: $0.50 at $1,000 per million


def request(max_tokens: int | None = 100) -> ChatRequest:
    return ChatRequest.of("What is the answer?", max_tokens=max_tokens)


# --- the rules --------------------------------------------------------------------------------------


def test_a_whole_number_written_as_a_float_is_its_value() -> None:
    """``12.0`` is 12 and not marked; a fraction or a float beyond 2**53 is still clamped."""
    assert provider_count(12.0) == (12, False)
    assert provider_count(float(2**31)) == (2**31, False)
    assert provider_count(12.5) == (12, True)
    assert provider_count(1e30) == (2**53, True)


def test_bedrock_reads_whole_floats_and_large_counts() -> None:
    """Bedrock's usage reads ``12.0`` as 12 and a count of 2**31 or more as itself, unmarked (it was read as 0)."""
    usage = bedrock_usage({"inputTokens": 2**31, "outputTokens": 12.0, "cacheReadInputTokens": 3.0})
    assert usage == Usage(input_tokens=2**31 + 3, output_tokens=12, cached_input_tokens=3)
    assert bedrock_usage({"inputTokens": -1, "outputTokens": 5}).clamped


def test_one_garbage_count_is_estimated_and_the_believable_one_kept() -> None:
    """A usage whose input count was garbage (clamped to 0) keeps its output count; the input is the estimate."""
    answer = ChatResponse(text="four")
    billed = billed_usage(request(), Usage(output_tokens=7, clamped=True), answer)
    assert billed == Usage(
        input_tokens=estimate_tokens(request().messages), output_tokens=7, clamped=True, estimated=True
    )


def test_a_usage_of_only_an_input_count_is_kept() -> None:
    """A usage that reports a plain input count and no output (a free output, say) is believed as reported."""
    usage = Usage(input_tokens=12)
    assert billed_usage(request(), usage, ChatResponse(text="four")) is usage


def test_the_output_ceiling_counts_every_choice_and_the_profile_bound() -> None:
    """The output ceiling is the request's max_tokens, else the profile's, else the default, times OpenAI's ``n``."""
    assert usage_ceiling(request(None)).output_tokens == DEFAULT_OUTPUT_BOUND
    assert usage_ceiling(request(None), 900).output_tokens == 900
    native = NativeRequest(protocol="openai-chat", body={"n": 4})
    asked = ChatRequest.of("What is the answer?", max_tokens=100, native=native)
    assert usage_ceiling(asked).output_tokens == 400


def test_an_answer_of_several_choices_without_usage_is_estimated_for_every_choice() -> None:
    """``n = 3`` and no usage: Turnout read one choice, and the provider billed three; each counts as the one read."""
    native = NativeRequest(protocol="openai-chat", body={"n": 3})
    asked = ChatRequest.of("What is the answer?", max_tokens=1000, native=native)
    billed = billed_usage(asked, None, ChatResponse(text=ANSWER))
    assert billed == Usage(input_tokens=estimate_tokens(asked.messages), output_tokens=3 * 500, estimated=True)


def test_the_input_ceiling_is_the_context_window_when_known() -> None:
    """Input is bounded by the model's context window when known, else by a multiple of the prompt's estimate."""
    estimate = estimate_tokens(request().messages)
    assert usage_ceiling(request()).input_tokens == INPUT_ESTIMATE_FACTOR * estimate + INPUT_SLACK
    assert usage_ceiling(request(), context_window=200_000).input_tokens == 200_000
    huge = Usage(input_tokens=2**53, output_tokens=2**53, cached_input_tokens=2**53, clamped=True)
    billed = billed_usage(request(), huge, ChatResponse(text="four"), context_window=200_000)
    assert billed == Usage(input_tokens=200_000, output_tokens=100, cached_input_tokens=200_000, clamped=True)


def test_an_unfinished_answer_is_bounded_but_not_estimated() -> None:
    """Without a completed answer a usage is only bounded (its estimate is the turn's), and none stays none."""
    assert billed_usage(request(), None) is None
    assert billed_usage(request(), Usage()) == Usage()
    assert billed_usage(request(), Usage(output_tokens=10**9)) == Usage(output_tokens=100, clamped=True)


def test_an_embedding_batch_without_a_believable_count_is_estimated_and_an_absurd_one_bounded() -> None:
    """An embedding batch reporting no tokens (or 0) is billed its estimate, marked; 2**53 is bounded, marked."""
    assert embedding_usage(None, 40) == Usage(input_tokens=40, estimated=True)
    assert embedding_usage(Usage(), 40) == Usage(input_tokens=40, estimated=True)
    assert embedding_usage(Usage(input_tokens=38), 40) == Usage(input_tokens=38)
    ceiling = INPUT_ESTIMATE_FACTOR * 40 + INPUT_SLACK
    assert embedding_usage(Usage(input_tokens=2**53), 40) == Usage(input_tokens=ceiling, clamped=True)


async def test_an_empty_answer_and_a_cut_stream_are_billed_within_the_bounds_too() -> None:
    """An empty answer reporting 2**53 output tokens, and a stream cut after a usage of 2**53, are recorded at the
    request's output bound, marked clamped.
    """
    huge = Usage(input_tokens=9, output_tokens=2**53, clamped=True)
    empty = ChatResponse(text="", usage=huge)
    cut = [UsageEvent(usage=huge), TextDelta(text="partial"), ProtocolError("cut")]
    reliable = walk(E("p.main", None, [Scripted(empty, "fine", cut)], price=(1.0, 1.0)), retries=1)
    scope = DispatchScope()
    await reliable.run(request(), "m", log=scope)
    stream = await reliable.open_stream(request(), "m", None, scope)
    with pytest.raises(ProtocolError):
        async for _ in stream.batches():
            pass
    outcomes = [(a.outcome, a.usage) for a in scope.attempts]
    bounded = Usage(input_tokens=9, output_tokens=100, clamped=True)
    assert outcomes[0] == ("empty", bounded) and outcomes[-1][1] == bounded


# --- through the gateway ------------------------------------------------------------------------------


@asynccontextmanager
async def upstream(usage: Any) -> AsyncIterator[str]:
    """A Chat Completions upstream answering :data:`ANSWER` with ``usage`` (None: no usage), whole or streamed."""

    async def chat(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        extra = {} if usage is None else {"usage": usage}
        if not body.get("stream"):
            message = {"role": "assistant", "content": ANSWER}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            reply = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice], **extra}
            return web.Response(body=orjson.dumps(reply), content_type="application/json")
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER}}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            *([{**chunk, "choices": [], **extra}] if usage is not None else []),
        ]
        text = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        return web.Response(body=text, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with loopback_app(app) as url:
        yield url + "/v1"


def toml(url: str, ledger: Path, limit: float) -> str:
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway.keys.team]\nkey = "{KEY}"\ndaily_limit_usd = {limit}\n'
        "[providers.models.openai.main]\n"
        f'uri = "{url}"\napi_key = "sk-up"\nmodel = "gpt-x"\n'
        "pricing = { input = 1000.0, output = 1000.0 }\n"
    )


async def chat(server: GatewayServer, *, stream: bool, max_tokens: int) -> int:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url + "/v1/chat/completions", data=orjson.dumps(body), headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


def rows(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        query = "SELECT input_tokens, output_tokens, usage_note, cost_usd FROM attempts ORDER BY id"
        return db.execute(query).fetchall()
    finally:
        db.close()


UNUSABLE: dict[str, Any] = {
    "missing": None,
    "negative": {"prompt_tokens": -5, "completion_tokens": -5},
    "text": {"prompt_tokens": "many", "completion_tokens": "lots"},
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("usage", UNUSABLE.values(), ids=UNUSABLE.keys())
async def test_answers_without_a_believable_usage_use_up_a_limited_key(
    tmp_path: Path, usage: Any, stream: bool
) -> None:
    """A $1/day key whose answers carry no usable usage is billed the estimate ($0.50 an answer here), so its
    third call is refused by the limit: answers are never free.
    """
    path = tmp_path / "ledger.sqlite3"
    async with upstream(usage) as url:
        client = Client.from_toml(toml(url, path, 1.0), surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            statuses = [await chat(server, stream=stream, max_tokens=600) for _ in range(3)]
    assert statuses == [200, 200, 429]
    recorded = rows(path)
    assert [(out, note) for _, out, note, _ in recorded] == [(500, "estimated")] * 2
    assert all(cost > 0.5 for *_, cost in recorded)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_usage_of_1e30_costs_at_most_what_the_request_allowed(tmp_path: Path, stream: bool) -> None:
    """An upstream usage of 1e30 tokens is billed at most the request's max_tokens and the bound of its input,
    marked clamped: the key is charged dollars, not trillions, and its next call is admitted.
    """
    path = tmp_path / "ledger.sqlite3"
    async with upstream({"prompt_tokens": 1e30, "completion_tokens": 1e30}) as url:
        client = Client.from_toml(toml(url, path, 10.0), surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            statuses = [await chat(server, stream=stream, max_tokens=600) for _ in range(2)]
    assert statuses == [200, 200]
    input_bound = INPUT_ESTIMATE_FACTOR * estimate_tokens(ChatRequest.of("hi").messages) + INPUT_SLACK
    for input_tokens, output_tokens, note, cost in rows(path):
        assert (input_tokens, output_tokens, note) == (input_bound, 600, "clamped")
        assert cost == pytest.approx((input_bound + 600) * 1000 / 1e6)
