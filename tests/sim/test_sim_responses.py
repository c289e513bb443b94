"""OpenAI Responses as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

import orjson

PATH = "/v1/responses"


def req(model: str, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "instructions": "be brief", "input": "hello there"}
    if stream:
        body["stream"] = True
    return body


async def test_ok_response_output_and_usage(wire: Any) -> None:
    """A response lists reasoning, message and function_call items with usage."""
    body = (await wire.post(PATH, req("sim-ok-r2-tc1"))).json()
    assert body["object"] == "response"
    assert body["status"] == "completed"
    assert [o["type"] for o in body["output"]] == ["reasoning", "message", "function_call"]
    assert body["output"][1]["content"][0] == {
        "type": "output_text",
        "annotations": [],
        "logprobs": [],
        "text": "Hello from the Turnout simulator.",
    }
    assert orjson.loads(body["output"][2]["arguments"]) == {"city": "Paris"}
    assert body["usage"]["input_tokens"] == 4
    assert body["usage"]["output_tokens"] == 8
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 2


async def test_stream_events_sequence_and_terminal_event(wire: Any) -> None:
    """Events carry matching event names, increasing sequence numbers and end with response.completed."""
    events = (await wire.post(PATH, req("sim-ok", stream=True))).events()
    data = [e.json() for e in events]
    assert all(d["type"] == e.event for d, e in zip(data, events, strict=True))
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert [e.event for e in events][:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert events[-1].event == "response.completed"
    assert data[-1]["response"]["usage"]["output_tokens"] == 5
    text = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    assert text == "Hello from the Turnout simulator."
    assert "[DONE]" not in [e.data for e in events]


async def test_function_call_stream(wire: Any) -> None:
    """Function-call arguments stream as deltas that join into the .done arguments."""
    data = [e.json() for e in (await wire.post(PATH, req("sim-ok-t0-tc1", stream=True))).events()]
    deltas = "".join(d["delta"] for d in data if d["type"] == "response.function_call_arguments.delta")
    done = next(d for d in data if d["type"] == "response.function_call_arguments.done")
    assert deltas == done["arguments"] == '{"city":"Paris"}'


async def test_inband_error_then_response_failed(wire: Any) -> None:
    """An in-band error is an error event (nested error object) followed by response.failed."""
    events = (await wire.post(PATH, req("sim-inband-a1-quota", stream=True))).events()
    assert [e.event for e in events][-2:] == ["error", "response.failed"]
    error = events[-2].json()["error"]
    assert error["code"] == "insufficient_quota"
    assert events[-1].json()["response"]["status"] == "failed"
    assert events[-1].json()["response"]["error"]["code"] == "insufficient_quota"


async def test_cut_stream_has_no_terminal_event(wire: Any) -> None:
    """A cut stream has no response.completed, incomplete or failed event."""
    names = [e.event for e in (await wire.post(PATH, req("sim-cut-a2", stream=True))).events()]
    assert not {"response.completed", "response.incomplete", "response.failed"} & set(names)


async def test_length_is_response_incomplete(wire: Any) -> None:
    """A length finish ends with response.incomplete (reason max_output_tokens)."""
    events = (await wire.post(PATH, req("sim-ok-len", stream=True))).events()
    assert events[-1].event == "response.incomplete"
    assert events[-1].json()["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_refusal_part(wire: Any) -> None:
    """A refusal is a refusal content part, streamed as response.refusal.delta."""
    body = (await wire.post(PATH, req("sim-refusal"))).json()
    assert body["output"][0]["content"][0]["type"] == "refusal"
    names = [e.event for e in (await wire.post(PATH, req("sim-refusal", stream=True))).events()]
    assert "response.refusal.delta" in names
    assert "response.refusal.done" in names


async def test_errors_use_openai_envelope(wire: Any) -> None:
    """HTTP errors on /v1/responses use OpenAI's error envelope."""
    r = await wire.post(PATH, req("sim-context"))
    assert r.status == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
