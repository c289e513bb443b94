"""OpenAI Chat Completions as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

PATH = "/v1/chat/completions"


def chat(model: str, *, stream: bool = False, usage: bool = False, text: str = "hello there") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if stream:
        body["stream"] = True
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def deltas(chunks: list[Any], key: str = "content") -> str:
    return "".join(
        c["choices"][0]["delta"].get(key) or ""
        for c in chunks
        if isinstance(c, dict) and c.get("choices") and "delta" in c["choices"][0]
    )


def finishes(chunks: list[Any]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"]
        for c in chunks
        if isinstance(c, dict) and c.get("choices") and c["choices"][0].get("finish_reason")
    ]


async def test_ok_non_stream_has_text_usage_and_stop(wire: Any) -> None:
    """A plain model gets a chat.completion with the default text and word-count usage."""
    r = await wire.post(PATH, chat("gpt-4.1", text="one two three"))
    assert r.status == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-4.1"
    choice = body["choices"][0]
    assert choice["message"]["content"] == "Hello from the Turnout simulator."
    assert choice["message"]["refusal"] is None
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 3
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == 8


async def test_ok_non_stream_tool_calls_and_reasoning(wire: Any) -> None:
    """sim-ok-tc2-r3 answers with two tool calls, reasoning_content and matching usage."""
    r = await wire.post(PATH, chat("sim-ok-tc2-r3"))
    msg = r.json()["choices"][0]["message"]
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather", "get_weather"]
    assert orjson.loads(msg["tool_calls"][1]["function"]["arguments"]) == {"city": "Tokyo", "unit": "celsius"}
    assert msg["reasoning_content"] == "lorem ipsum dolor"
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == 3 + 5 + 2
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 3


async def test_ok_stream_with_include_usage_ends_with_usage_then_done(wire: Any) -> None:
    """A stream has a role chunk, content deltas, a finish chunk, a choices:[] usage chunk, then [DONE]."""
    r = await wire.post(PATH, chat("sim-ok", stream=True, usage=True))
    assert r.status == 200
    assert r.headers["Content-Type"] == "text/event-stream"
    chunks = r.data()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert deltas(chunks) == "Hello from the Turnout simulator."
    assert chunks[-3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"]["completion_tokens"] == 5
    assert chunks[-1] == "[DONE]"


async def test_stream_without_include_usage_sends_no_usage(wire: Any) -> None:
    """Without stream_options.include_usage no chunk carries usage."""
    chunks = (await wire.post(PATH, chat("sim-ok", stream=True))).data()
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-1] == "[DONE]"


async def test_stream_tool_call_fragments_concatenate_by_index(wire: Any) -> None:
    """Tool calls stream as id/name first, then argument fragments that join into valid JSON."""
    chunks = (await wire.post(PATH, chat("sim-ok-tc2-t0", stream=True))).data()
    calls: dict[int, dict[str, str]] = {}
    for c in chunks[:-1]:
        for tc in c["choices"][0]["delta"].get("tool_calls", []):
            slot = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            slot["name"] += tc.get("function", {}).get("name", "")
            slot["arguments"] += tc["function"].get("arguments", "")
    assert [orjson.loads(calls[i]["arguments"]) for i in (0, 1)] == [
        {"city": "Paris"},
        {"city": "Tokyo", "unit": "celsius"},
    ]
    assert chunks[0]["choices"][0]["delta"]["content"] is None
    assert finishes(chunks) == ["tool_calls"]


async def test_reasoning_streams_as_reasoning_content(wire: Any) -> None:
    """Reasoning words stream in delta.reasoning_content before the answer text."""
    chunks = (await wire.post(PATH, chat("sim-ok-r2", stream=True))).data()
    assert deltas(chunks, "reasoning_content") == "lorem ipsum"
    assert deltas(chunks) == "Hello from the Turnout simulator."


@pytest.mark.parametrize(
    ("model", "status", "etype", "code"),
    [
        ("sim-429", 429, "requests", "rate_limit_exceeded"),
        ("sim-quota", 429, "insufficient_quota", "insufficient_quota"),
        ("sim-402", 402, "unknown_error", "invalid_request_error"),
        ("sim-401", 401, "invalid_request_error", "invalid_api_key"),
        ("sim-403", 403, "request_forbidden", "unsupported_country_region_territory"),
        ("sim-404", 404, "invalid_request_error", "model_not_found"),
        ("sim-context", 400, "invalid_request_error", "context_length_exceeded"),
        ("sim-policy", 400, "invalid_request_error", "content_policy_violation"),
        ("sim-500", 500, "server_error", None),
        ("sim-503", 503, "server_error", None),
    ],
)
async def test_error_bodies_have_openai_shape(wire: Any, model: str, status: int, etype: str, code: str | None) -> None:
    """Each error kind answers with its real status and {"error": {message, type, param, code}}."""
    r = await wire.post(PATH, chat(model))
    assert r.status == status
    err = r.json()["error"]
    assert (err["type"], err["code"]) == (etype, code)
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]


async def test_billing_402_is_deepseek_insufficient_balance(wire: Any) -> None:
    """sim-billing answers DeepSeek's 402 "Insufficient Balance"."""
    r = await wire.post(PATH, chat("sim-billing"))
    assert r.status == 402
    assert r.json()["error"]["message"] == "Insufficient Balance"


async def test_context_error_names_limit_and_tokens(wire: Any) -> None:
    """The context-length message carries the configured limit and prompt size."""
    r = await wire.post(PATH, chat("sim-context-lim8000-t9000"))
    err = r.json()["error"]
    assert err["param"] == "messages"
    assert "maximum context length is 8000 tokens" in err["message"]
    assert "resulted in 9000 tokens" in err["message"]


async def test_404_names_the_model(wire: Any) -> None:
    """model_not_found names the model that was asked for."""
    r = await wire.post(PATH, chat("sim-404"))
    assert "`sim-404`" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("model", "retry_after", "retry_after_ms"),
    [
        ("sim-429-ra2", "2", None),
        ("sim-429-ms1500", None, "1500"),
        ("sim-429", None, None),
        ("sim-429-ra0.5", "0.5", None),
    ],
)
async def test_429_retry_headers(wire: Any, model: str, retry_after: str | None, retry_after_ms: str | None) -> None:
    """Retry-After and retry-after-ms are sent exactly when asked for."""
    r = await wire.post(PATH, chat(model))
    assert r.status == 429
    headers = {k.lower(): v for k, v in r.headers.items()}
    assert headers.get("retry-after") == retry_after
    assert headers.get("retry-after-ms") == retry_after_ms
    assert "x-request-id" in headers


async def test_ratelimit_reset_header_from_script(wire: Any, sim: Any) -> None:
    """A script can add OpenAI's x-ratelimit-reset-requests duration header."""
    sim.set_script({"models": {"m": {"steps": [{"do": "status", "status": 429, "ratelimit_reset": "6m0s"}]}}})
    r = await wire.post(PATH, chat("m"))
    assert r.headers["x-ratelimit-reset-requests"] == "6m0s"


async def test_502_is_a_cloudflare_html_page(wire: Any) -> None:
    """A 502 answers with an HTML page, not JSON."""
    r = await wire.post(PATH, chat("sim-502"))
    assert r.status == 502
    assert r.headers["Content-Type"].startswith("text/html")
    assert b"<center>cloudflare</center>" in r.body
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(r.body)


async def test_cut_stream_ends_without_finish_or_done(wire: Any) -> None:
    """sim-cut-a2 sends two content deltas and ends the body with no finish_reason and no [DONE]."""
    r = await wire.post(PATH, chat("sim-cut-a2", stream=True, usage=True))
    chunks = r.data()
    assert "[DONE]" not in chunks
    assert finishes(chunks) == []
    assert deltas(chunks) == "Hello from"


async def test_hard_cut_drops_the_connection(wire: Any) -> None:
    """sim-cut-a2-hard drops the connection mid-body, which the client sees as a payload error."""
    with pytest.raises(aiohttp.ClientPayloadError):
        await wire.post(PATH, chat("sim-cut-a2-hard", stream=True))


async def test_missing_done_keeps_finish_but_drops_done(wire: Any) -> None:
    """sim-nodone ends after the finish chunk (and usage) without data: [DONE]."""
    chunks = (await wire.post(PATH, chat("sim-nodone", stream=True, usage=True))).data()
    assert "[DONE]" not in chunks
    assert finishes(chunks) == ["stop"]
    assert chunks[-1]["choices"] == []


async def test_malformed_chunk_is_invalid_json_mid_stream(wire: Any) -> None:
    """sim-malformed-a1 sends one data line that is not JSON, then the rest of the stream."""
    events = (await wire.post(PATH, chat("sim-malformed-a1", stream=True))).events()
    bad = []
    for e in events:
        try:
            orjson.loads(e.data) if e.data != "[DONE]" else None
        except orjson.JSONDecodeError:
            bad.append(e.data)
    assert len(bad) == 1
    assert events[-1].data == "[DONE]"


async def test_inband_error_is_an_error_object_then_eof(wire: Any) -> None:
    """sim-inband-a2 sends two deltas, then data: {"error": ...} and ends without finish or [DONE]."""
    chunks = (await wire.post(PATH, chat("sim-inband-a2", stream=True))).data()
    assert chunks[-1]["error"]["type"] == "server_error"
    assert "[DONE]" not in chunks
    assert finishes(chunks) == []
    assert deltas(chunks[:-1]) == "Hello from"


async def test_inband_error_openrouter_style(wire: Any) -> None:
    """The OpenRouter style puts error next to choices with finish_reason "error"."""
    chunks = (await wire.post(PATH, chat("sim-inband-a1-or", stream=True))).data()
    last = chunks[-1]
    assert last["error"] == {"code": "server_error", "message": "Provider disconnected unexpectedly"}
    assert last["choices"][0]["finish_reason"] == "error"
    assert "[DONE]" not in chunks


async def test_inband_error_without_stream_is_an_http_error(wire: Any) -> None:
    """Asked without a stream, an in-band error becomes the same error as an HTTP 500."""
    r = await wire.post(PATH, chat("sim-inband"))
    assert r.status == 500
    assert r.json()["error"]["type"] == "server_error"


async def test_refusal_non_stream_and_stream(wire: Any) -> None:
    """A refusal fills message.refusal (content null) and streams as delta.refusal with finish stop."""
    msg = (await wire.post(PATH, chat("sim-refusal"))).json()["choices"][0]["message"]
    assert msg["content"] is None
    assert msg["refusal"] == "I'm sorry, but I can't help with that."
    chunks = (await wire.post(PATH, chat("sim-refusal", stream=True))).data()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": ""}
    assert deltas(chunks, "refusal") == "I'm sorry, but I can't help with that."
    assert finishes(chunks) == ["stop"]


async def test_empty_answer_has_no_text_and_no_tools(wire: Any) -> None:
    """sim-empty answers 200 with empty content and no tool calls, streamed or not."""
    msg = (await wire.post(PATH, chat("sim-empty"))).json()["choices"][0]["message"]
    assert msg["content"] == ""
    assert "tool_calls" not in msg
    chunks = (await wire.post(PATH, chat("sim-empty", stream=True))).data()
    assert deltas(chunks) == ""
    assert chunks[-1] == "[DONE]"


async def test_think_only_answer(wire: Any) -> None:
    """sim-thinkonly answers with a <think> block and nothing else."""
    content = (await wire.post(PATH, chat("sim-thinkonly"))).json()["choices"][0]["message"]["content"]
    assert content.startswith("<think>")
    assert content.endswith("</think>")


async def test_length_finish(wire: Any) -> None:
    """sim-ok-len finishes with finish_reason "length"."""
    r = await wire.post(PATH, chat("sim-ok-len"))
    assert r.json()["choices"][0]["finish_reason"] == "length"


async def test_generated_tokens(wire: Any) -> None:
    """sim-ok-t20 generates exactly 20 words and reports 20 completion tokens."""
    body = (await wire.post(PATH, chat("sim-ok-t20"))).json()
    assert len(body["choices"][0]["message"]["content"].split()) == 20
    assert body["usage"]["completion_tokens"] == 20


async def test_non_stream_cut_truncates_the_body(wire: Any) -> None:
    """Without a stream, a cut announces the whole body and drops the connection halfway."""
    with pytest.raises(aiohttp.ClientPayloadError):
        await wire.post(PATH, chat("sim-cut"))


async def test_non_stream_malformed_body(wire: Any) -> None:
    """Without a stream, malformed answers 200 with a body that is not JSON."""
    r = await wire.post(PATH, chat("sim-malformed"))
    assert r.status == 200
    with pytest.raises(orjson.JSONDecodeError):
        r.json()


async def test_unknown_sim_model_is_a_400_naming_the_problem(wire: Any) -> None:
    """A sim- name the grammar cannot read answers 400 in the protocol's shape."""
    r = await wire.post(PATH, chat("sim-bogus"))
    assert r.status == 400
    assert "unknown behaviour 'bogus'" in r.json()["error"]["message"]


async def test_body_that_is_not_json_is_a_400(wire: Any, sim: Any) -> None:
    """A body that is not a JSON object answers 400 and is logged without counting an attempt."""
    r = await wire.post(PATH, b"not json")
    assert r.status == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert [(e.attempt, e.behaviour, e.outcome) for e in sim.log] == [(0, "invalid", "status:400")]
