"""Ollama's native chat as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

import orjson

PATH = "/api/chat"


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello there"}], **extra}


async def test_stream_is_the_default_ndjson(wire: Any) -> None:
    """Without "stream", Ollama streams NDJSON lines ending with done:true and the counts."""
    r = await wire.post(PATH, chat("llama3.2"))
    assert r.headers["Content-Type"] == "application/x-ndjson"
    lines = r.lines()
    assert all(line["done"] is False for line in lines[:-1])
    assert "".join(line["message"]["content"] for line in lines) == "Hello from the Turnout simulator."
    final = lines[-1]
    assert final["done"] is True
    assert final["done_reason"] == "stop"
    assert (final["prompt_eval_count"], final["eval_count"]) == (2, 5)


async def test_non_stream_with_thinking_and_tool_calls(wire: Any) -> None:
    """stream:false answers one object with content, thinking and whole tool calls (object arguments)."""
    body = (await wire.post(PATH, chat("sim-ok-r2-tc1", stream=False))).json()
    assert body["done"] is True
    assert body["message"]["content"] == "Hello from the Turnout simulator."
    assert body["message"]["thinking"] == "lorem ipsum"
    assert body["message"]["tool_calls"] == [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]


async def test_stream_tool_call_arrives_whole(wire: Any) -> None:
    """A streamed tool call arrives whole in a done:false line; thinking streams in message.thinking."""
    lines = (await wire.post(PATH, chat("sim-ok-r1-tc1"))).lines()
    assert lines[0]["message"]["thinking"] == "lorem"
    calls = [line["message"]["tool_calls"] for line in lines if "tool_calls" in line["message"]]
    assert calls == [[{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]]


async def test_errors_are_error_strings(wire: Any) -> None:
    """Errors are {"error": "<text>"}; a missing model is 404 "model 'x' not found"."""
    r = await wire.post(PATH, chat("sim-404"))
    assert r.status == 404
    assert r.json() == {"error": "model 'sim-404' not found"}
    r = await wire.post(PATH, chat("sim-429-ra1"))
    assert r.status == 429
    assert isinstance(r.json()["error"], str)
    assert r.headers["Retry-After"] == "1"


async def test_cut_stream_has_no_done_line(wire: Any) -> None:
    """A cut stream ends without the done:true line."""
    lines = (await wire.post(PATH, chat("sim-cut-a2"))).lines()
    assert len(lines) == 2
    assert not any(line["done"] for line in lines)


async def test_inband_error_line(wire: Any) -> None:
    """An in-band error is an {"error": ...} line in place of the final line."""
    lines = (await wire.post(PATH, chat("sim-inband-a1"))).lines()
    assert lines[-1] == {"error": "an error was encountered while running the model"}
    assert not any(line.get("done") for line in lines)


async def test_malformed_line(wire: Any) -> None:
    """A malformed stream has one line that is not JSON and still ends with done:true."""
    raw = (await wire.post(PATH, chat("sim-malformed-a1"))).body.splitlines()
    bad = 0
    for line in raw:
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
    assert bad == 1
    assert orjson.loads(raw[-1])["done"] is True


async def test_refusal_is_plain_text_and_length(wire: Any) -> None:
    """Ollama has no refusal signal (plain text); a length finish is done_reason "length"."""
    body = (await wire.post(PATH, chat("sim-refusal", stream=False))).json()
    assert body["message"]["content"] == "I'm sorry, but I can't help with that."
    assert (await wire.post(PATH, chat("sim-ok-len", stream=False))).json()["done_reason"] == "length"
