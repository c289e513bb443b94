"""Every adapter's completed answer is billed a believable usage: estimated when the provider's is missing or
unusable, bounded by what the request allowed when it is absurd.

Each family's answer is served by a loopback upstream in its own wire format (a whole answer and a stream), read by
the real adapter, and walked by a :class:`~turnout.walk.reliable.ReliableProvider` priced at $1,000 per million tokens:
the attempt's record is what the ledger, the spend book and a shared limit bill.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from provider_kit import RecordingServer, Reply, make_adapter
from test_vertex import FakeTokens

from fakes import E, walk
from turnout.config import load_config_dict
from turnout.core.attribution import Attempt, DispatchScope
from turnout.core.embeddings import EmbedRequest, estimated_tokens
from turnout.core.estimate import INPUT_ESTIMATE_FACTOR, INPUT_SLACK, estimate_tokens
from turnout.core.types import ChatRequest, Message, Usage
from turnout.providers import HttpClient, build_adapter
from turnout.providers.base import HTTPAdapter
from turnout.sim.aws import event
from turnout.walk.embed import embed_through

ANSWER = "The answer, delivered in full to the caller."  # 44 characters: an estimate of 11 output tokens
PRICE = 1_000.0  # dollars per million tokens, input and output
MAX_TOKENS = 50

#: Usages that say nothing believable: ``None`` is no usage at all.
UNUSABLE: dict[str, tuple[Any, Any] | None] = {
    "missing": None,
    "negative": (-40, -7),
    "text": ("lots", "many"),
    "zero": (0, 0),
}
HUGE = (1e30, 1e30)

JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}
NDJSON = {"Content-Type": "application/x-ndjson"}
EVENTS = {"Content-Type": "application/vnd.amazon.eventstream"}


def sse(*objs: Any, done: bool = False) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def named_sse(*objs: dict[str, Any]) -> bytes:
    return b"".join(b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objs)


# --- each family's answer with a given usage: (whole answer, stream) ---------------------------------


def openai_chat(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    usage: dict[str, Any] = {}
    if counts is not None:
        usage = {"usage": {"prompt_tokens": counts[0], "completion_tokens": counts[1]}}
    message = {"role": "assistant", "content": ANSWER}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    whole = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]}
    chunk: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    stream: list[dict[str, Any]] = [
        {**chunk, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if counts is not None:
        stream.append({**chunk, "choices": [], **usage})
    return Reply(headers=JSON, pieces=[orjson.dumps({**whole, **usage})]), Reply(
        headers=SSE, pieces=[sse(*stream, done=True)]
    )


def openai_responses(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    usage = {} if counts is None else {"usage": {"input_tokens": counts[0], "output_tokens": counts[1]}}
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
    }
    whole = {"id": "resp_1", "object": "response", "status": "completed", "model": "m", "output": [item], **usage}
    stream = named_sse(
        {"type": "response.created", "response": {**whole, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": ANSWER},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": whole},
    )
    return Reply(headers=JSON, pieces=[orjson.dumps(whole)]), Reply(headers=SSE, pieces=[stream])


def anthropic(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    usage = {} if counts is None else {"usage": {"input_tokens": counts[0], "output_tokens": counts[1]}}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn"}
    whole = {**message, "content": [{"type": "text", "text": ANSWER}], **usage}
    start_usage = {} if counts is None else {"usage": {"input_tokens": counts[0], "output_tokens": 1}}
    end_usage = {} if counts is None else {"usage": {"output_tokens": counts[1]}}
    stream = named_sse(
        {"type": "message_start", "message": {**message, "stop_reason": None, "content": [], **start_usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ANSWER}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, **end_usage},
        {"type": "message_stop"},
    )
    return Reply(headers=JSON, pieces=[orjson.dumps(whole)]), Reply(headers=SSE, pieces=[stream])


def gemini(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    meta = (
        {} if counts is None else {"usageMetadata": {"promptTokenCount": counts[0], "candidatesTokenCount": counts[1]}}
    )
    content = {"role": "model", "parts": [{"text": ANSWER}]}
    whole = {"candidates": [{"content": content, "finishReason": "STOP", "index": 0}], **meta}
    return Reply(headers=JSON, pieces=[orjson.dumps(whole)]), Reply(headers=SSE, pieces=[sse(whole)])


def ollama(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    usage = {} if counts is None else {"prompt_eval_count": counts[0], "eval_count": counts[1]}
    done = {"model": "m", "done": True, "done_reason": "stop", **usage}
    whole = {**done, "message": {"role": "assistant", "content": ANSWER}}
    lines = [
        {"model": "m", "done": False, "message": {"role": "assistant", "content": ANSWER}},
        {**done, "message": {"role": "assistant", "content": ""}},
    ]
    stream = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    return Reply(headers=JSON, pieces=[orjson.dumps(whole)]), Reply(headers=NDJSON, pieces=[stream])


def bedrock(counts: tuple[Any, Any] | None) -> tuple[Reply, Reply]:
    usage = {} if counts is None else {"usage": {"inputTokens": counts[0], "outputTokens": counts[1]}}
    message = {"role": "assistant", "content": [{"text": ANSWER}]}
    whole = {"output": {"message": message}, "stopReason": "end_turn", **usage}
    frames = [
        event("messageStart", orjson.dumps({"role": "assistant"})),
        event("contentBlockDelta", orjson.dumps({"contentBlockIndex": 0, "delta": {"text": ANSWER}})),
        event("contentBlockStop", orjson.dumps({"contentBlockIndex": 0})),
        event("messageStop", orjson.dumps({"stopReason": "end_turn"})),
        event("metadata", orjson.dumps({**usage, "metrics": {"latencyMs": 1}})),
    ]
    return Reply(headers=JSON, pieces=[orjson.dumps(whole)]), Reply(headers=EVENTS, pieces=[b"".join(frames)])


def vertex_adapter(http: HttpClient, url: str, model: str) -> HTTPAdapter:
    fields = {"uri": url, "project": "sim-project", "model": model}
    cfg = load_config_dict({"providers": {"models": {"vertex": {"test": fields}}}}, env={})
    adapter = build_adapter("vertex.test", cfg.profiles()["vertex.test"], http, None)
    adapter.tokens = FakeTokens()  # type: ignore[attr-defined]
    return adapter


Wire = Callable[[tuple[Any, Any] | None], tuple[Reply, Reply]]
Make = Callable[[HttpClient, str], HTTPAdapter]

#: family → (its adapter on a loopback URL, the model asked for, its wire)
FAMILIES: dict[str, tuple[Make, str, Wire]] = {
    "openai_chat": (lambda h, u: make_adapter(h, "openai", u + "/v1"), "gpt-x", openai_chat),
    "openai_compat": (lambda h, u: make_adapter(h, "deepseek", u), "deepseek-x", openai_chat),
    "openai_responses": (
        lambda h, u: make_adapter(h, "openai", u + "/v1", wire_api="responses"),
        "gpt-x",
        openai_responses,
    ),
    "anthropic": (lambda h, u: make_adapter(h, "anthropic", u), "claude-x", anthropic),
    "gemini": (lambda h, u: make_adapter(h, "gemini", u + "/v1beta"), "gemini-x", gemini),
    "ollama": (lambda h, u: make_adapter(h, "ollama", u, api_key=None), "llama-x", ollama),
    "bedrock": (
        lambda h, u: make_adapter(h, "bedrock", u, region="us-east-1", api_key="bedrock-api-key-0001"),
        "amazon.nova-x",
        bedrock,
    ),
    "vertex_anthropic": (lambda h, u: vertex_adapter(h, u, "claude-sonnet-4-5"), "claude-sonnet-4-5", anthropic),
    "vertex_gemini": (lambda h, u: vertex_adapter(h, u, "gemini-2.5-flash"), "gemini-2.5-flash", gemini),
}


def request() -> ChatRequest:
    return ChatRequest(messages=(Message.user("What is the answer to the question I asked?"),), max_tokens=MAX_TOKENS)


async def billed(
    family: str, counts: tuple[Any, Any] | None, http: HttpClient, server: RecordingServer
) -> list[Attempt]:
    """The recorded attempt of a whole answer and of a stream of ``family`` reporting ``counts``."""
    make, model, wire = FAMILIES[family]
    whole, stream = wire(counts)
    server.reply(whole, stream)
    reliable = walk(E(f"{family}.test", None, [make(http, server.url)], price=(PRICE, PRICE)), retries=0)
    scope = DispatchScope()
    served = await reliable.run(request(), model, log=scope)
    assert served.response.text == ANSWER
    opened = await reliable.open_stream(request(), model, None, scope)
    text = ""
    async for batch in opened.batches():
        text += "".join(getattr(e, "text", "") for e in batch if e.type == "text")
    assert text == ANSWER
    assert [a.outcome for a in scope.attempts] == ["ok", "ok"]
    return scope.attempts


@pytest.mark.parametrize("counts", UNUSABLE.values(), ids=UNUSABLE.keys())
@pytest.mark.parametrize("family", FAMILIES)
async def test_an_answer_without_a_believable_usage_is_billed_by_the_estimate(
    family: str, counts: tuple[Any, Any] | None, http: HttpClient, server: RecordingServer
) -> None:
    """A completed answer (whole or streamed) whose usage is missing, negative, not a number or all zero is billed
    the prompt's estimate and the estimate of the text delivered, marked estimated: never $0.
    """
    input_estimate = estimate_tokens(request().messages)
    for attempt in await billed(family, counts, http, server):
        usage = attempt.usage
        assert usage is not None and usage.estimated
        assert (usage.input_tokens, usage.output_tokens) == (input_estimate, -(-len(ANSWER) // 4))
        assert attempt.cost_usd == pytest.approx((input_estimate + usage.output_tokens) * PRICE / 1e6)


@pytest.mark.parametrize("family", FAMILIES)
async def test_an_absurd_usage_is_bounded_by_what_the_request_allowed(
    family: str, http: HttpClient, server: RecordingServer
) -> None:
    """A usage of 1e30 tokens costs at most the request's output bound and the bound of its input (no context
    window known: a multiple of the prompt's estimate), marked clamped: never trillions.
    """
    input_bound = INPUT_ESTIMATE_FACTOR * estimate_tokens(request().messages) + INPUT_SLACK
    for attempt in await billed(family, HUGE, http, server):
        usage = attempt.usage
        assert usage is not None and usage.clamped and not usage.estimated
        assert (usage.input_tokens, usage.output_tokens) == (input_bound, MAX_TOKENS)
        assert attempt.cost_usd is not None and attempt.cost_usd <= (input_bound + MAX_TOKENS) * PRICE / 1e6 < 2.0


@pytest.mark.parametrize("family", FAMILIES)
async def test_a_believable_usage_is_billed_as_reported(family: str, http: HttpClient, server: RecordingServer) -> None:
    """A plain usage within the request's bounds is billed exactly as the provider reported it, unmarked."""
    for attempt in await billed(family, (21, 9), http, server):
        usage = attempt.usage
        assert usage is not None and not usage.clamped and not usage.estimated
        assert (usage.input_tokens, usage.output_tokens) == (21, 9)


EMBEDDING_USAGES: dict[str, tuple[Any, bool, bool]] = {  # usage → (input count billed, estimated, clamped)
    "missing": (None, True, False),
    "negative": ({"prompt_tokens": -3, "total_tokens": -3}, True, False),
    "text": ({"prompt_tokens": "many", "total_tokens": "many"}, True, False),
    "zero": ({"prompt_tokens": 0, "total_tokens": 0}, True, False),
    "huge": ({"prompt_tokens": 1e30, "total_tokens": 1e30}, True, False),
    "2**50": ({"prompt_tokens": 2**50, "total_tokens": 2**50}, False, True),
}


@pytest.mark.parametrize("name", EMBEDDING_USAGES)
async def test_an_embedding_batch_is_billed_a_believable_usage(
    name: str, http: HttpClient, server: RecordingServer
) -> None:
    """An OpenAI embedding answer without a believable count is billed its inputs' estimate, marked estimated; a
    count far beyond the inputs is bounded by a multiple of it, marked clamped.
    """
    usage, estimated, clamped = EMBEDDING_USAGES[name]
    answer = {"object": "list", "model": "e", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}]}
    if usage is not None:
        answer["usage"] = usage
    server.reply(Reply(headers=JSON, pieces=[orjson.dumps(answer)]))
    reliable = walk(E("openai.test", None, [make_adapter(http, "openai", server.url + "/v1")], price=(PRICE, PRICE)))
    scope = DispatchScope()
    inputs = ("an input of some words",)
    served = await embed_through(reliable, EmbedRequest(inputs=inputs), "text-embedding-3-small", scope, {})
    estimate = estimated_tokens(inputs[0])
    expected = estimate if estimated else INPUT_ESTIMATE_FACTOR * estimate + INPUT_SLACK
    assert served.usage == Usage(input_tokens=expected, estimated=estimated, clamped=clamped)
    assert [a.usage for a in scope.attempts] == [served.usage]
