"""Anthropic Messages as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

PATH = "/v1/messages"


def msg(model: str, *, stream: bool = False, text: str = "hello there") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 100,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    if stream:
        body["stream"] = True
    return body


def names(events: list[Any]) -> list[str]:
    return [e.event for e in events]


async def test_ok_message_blocks_and_usage(wire: Any, sim: Any) -> None:
    """A message carries thinking, text and tool_use blocks, stop_reason tool_use and exact usage."""
    sim.set_script(
        {
            "models": {
                "claude": {
                    "steps": [
                        {
                            "do": "ok",
                            "text": "Checking now.",
                            "reasoning": "User wants weather.",
                            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                            "usage": {"cached_input": 2},
                        }
                    ]
                }
            }
        }
    )
    r = await wire.post(PATH, msg("claude", text="what is the weather"))
    body = r.json()
    assert body["type"] == "message"
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][0]["thinking"] == "User wants weather."
    assert body["content"][0]["signature"]
    assert body["content"][2]["input"] == {"city": "Paris"}
    assert body["content"][2]["id"].startswith("toolu_")
    assert body["stop_reason"] == "tool_use"
    # 6 words in system + message, 2 of them cached: Anthropic's input_tokens excludes cache reads.
    assert body["usage"]["input_tokens"] == 4
    assert body["usage"]["cache_read_input_tokens"] == 2
    assert body["usage"]["output_tokens"] == 3 + 2 + 1
    assert sim.log[-1].usage.input == 6


@pytest.mark.parametrize("stream", [False, True])
async def test_cache_reads_and_writes_are_reported_apart(wire: Any, sim: Any, stream: bool) -> None:
    """Scripted cache reads and writes are Anthropic's cache_read and cache_creation counters, also in a stream."""
    usage = {"input": 1200, "output": 4, "cached_input": 1000, "cache_write": 150}
    sim.set_script({"models": {"claude": {"steps": [{"do": "ok", "text": "hi", "usage": usage}]}}})
    r = await wire.post(PATH, msg("claude", stream=stream))
    reported = r.events()[-2].json()["usage"] if stream else r.json()["usage"]
    assert reported["input_tokens"] == 50
    assert (reported["cache_read_input_tokens"], reported["cache_creation_input_tokens"]) == (1000, 150)
    assert (sim.log[-1].usage.cached_input, sim.log[-1].usage.cache_write) == (1000, 150)


async def test_ok_stream_event_order_and_terminator(wire: Any) -> None:
    """A stream goes message_start, ping, block start/deltas/stop, message_delta, message_stop."""
    events = (await wire.post(PATH, msg("sim-ok", stream=True))).events()
    assert names(events)[:3] == ["message_start", "ping", "content_block_start"]
    assert names(events)[-2:] == ["message_delta", "message_stop"]
    assert all(e.json()["type"] == e.event for e in events)
    text = "".join(e.json()["delta"]["text"] for e in events if e.event == "content_block_delta")
    assert text == "Hello from the Turnout simulator."
    delta = events[-2].json()
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == 5
    assert events[0].json()["message"]["usage"]["input_tokens"] == 4


async def test_stream_thinking_and_tool_use(wire: Any) -> None:
    """Thinking ends with a signature_delta; tool input arrives as input_json_delta fragments starting with ""."""
    events = (await wire.post(PATH, msg("sim-ok-r2-tc1", stream=True))).events()
    data = [e.json() for e in events]
    starts = [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    sig = [d for d in data if d["type"] == "content_block_delta" and d["delta"]["type"] == "signature_delta"]
    assert len(sig) == 1
    fragments = [d["delta"]["partial_json"] for d in data if d.get("delta", {}).get("type") == "input_json_delta"]
    assert fragments[0] == ""
    assert orjson.loads("".join(fragments)) == {"city": "Paris"}
    assert data[-2]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("model", "status", "etype", "fragment"),
    [
        ("sim-429", 429, "rate_limit_error", "rate limit"),
        ("sim-529", 529, "overloaded_error", "Overloaded"),
        ("sim-overloaded", 529, "overloaded_error", "Overloaded"),
        ("sim-billing", 400, "invalid_request_error", "credit balance is too low"),
        ("sim-401", 401, "authentication_error", "invalid x-api-key"),
        ("sim-403", 403, "permission_error", "permission"),
        ("sim-404", 404, "not_found_error", "model: sim-404"),
        ("sim-500", 500, "api_error", "Internal server error"),
        (
            "sim-context-lim200000-t205429",
            400,
            "invalid_request_error",
            "prompt is too long: 205429 tokens > 200000 maximum",
        ),
    ],
)
async def test_error_bodies_have_anthropic_shape(wire: Any, model: str, status: int, etype: str, fragment: str) -> None:
    """Errors are {"type": "error", "error": {type, message}, "request_id"} with the real status."""
    r = await wire.post(PATH, msg(model))
    assert r.status == status
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == etype
    assert fragment in body["error"]["message"]
    assert body["request_id"] == r.headers["request-id"]


async def test_429_retry_after_header(wire: Any) -> None:
    """sim-429-ra3 sends retry-after: 3."""
    r = await wire.post(PATH, msg("sim-429-ra3"))
    assert r.headers["retry-after"] == "3"


async def test_cut_stream_has_no_message_delta_or_stop(wire: Any) -> None:
    """A cut stream ends after two text deltas with no message_delta and no message_stop."""
    events = (await wire.post(PATH, msg("sim-cut-a2", stream=True))).events()
    assert "message_stop" not in names(events)
    assert "message_delta" not in names(events)
    assert names(events).count("content_block_delta") == 2


async def test_missing_done_leaves_out_message_stop(wire: Any) -> None:
    """sim-nodone ends after message_delta (stop_reason set) without message_stop."""
    events = (await wire.post(PATH, msg("sim-nodone", stream=True))).events()
    assert names(events)[-1] == "message_delta"
    assert events[-1].json()["delta"]["stop_reason"] == "end_turn"


async def test_inband_error_event(wire: Any) -> None:
    """An in-band error is event: error with overloaded_error, then the body ends."""
    events = (await wire.post(PATH, msg("sim-inband-a1", stream=True))).events()
    assert events[-1].event == "error"
    assert events[-1].json() == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert "message_stop" not in names(events)


async def test_refusal_stop_reason(wire: Any) -> None:
    """A refusal is stop_reason "refusal", streamed or not."""
    assert (await wire.post(PATH, msg("sim-refusal"))).json()["stop_reason"] == "refusal"
    events = (await wire.post(PATH, msg("sim-refusal", stream=True))).events()
    assert events[-2].json()["delta"]["stop_reason"] == "refusal"
    assert events[-1].event == "message_stop"


async def test_malformed_event(wire: Any) -> None:
    """A malformed stream carries one data line that is not JSON and still ends with message_stop."""
    events = (await wire.post(PATH, msg("sim-malformed-a1", stream=True))).events()
    bad = 0
    for e in events:
        try:
            e.json()
        except orjson.JSONDecodeError:
            bad += 1
    assert bad == 1
    assert events[-1].event == "message_stop"


async def test_empty_and_length(wire: Any) -> None:
    """An empty answer has no content blocks; a length finish is stop_reason max_tokens."""
    empty = (await wire.post(PATH, msg("sim-empty"))).json()
    assert empty["content"] == []
    assert empty["stop_reason"] == "end_turn"
    assert (await wire.post(PATH, msg("sim-ok-len"))).json()["stop_reason"] == "max_tokens"
