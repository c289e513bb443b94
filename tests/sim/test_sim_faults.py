"""Every stream fault in every protocol: the completion signal is present exactly when it should be."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

MESSAGES = [{"role": "user", "content": "hello there"}]


def _request(protocol: str, model: str) -> tuple[str, dict[str, Any]]:
    if protocol == "openai":
        return "/v1/chat/completions", {"model": model, "stream": True, "messages": MESSAGES}
    if protocol == "azure":
        return f"/openai/deployments/{model}/chat/completions?api-version=2024-10-21", {
            "stream": True,
            "messages": MESSAGES,
        }
    if protocol == "responses":
        return "/v1/responses", {"model": model, "stream": True, "input": "hello there"}
    if protocol == "anthropic":
        return "/v1/messages", {"model": model, "stream": True, "max_tokens": 50, "messages": MESSAGES}
    if protocol == "gemini":
        return f"/v1beta/models/{model}:streamGenerateContent?alt=sse", {
            "contents": [{"role": "user", "parts": [{"text": "hello there"}]}]
        }
    return "/api/chat", {"model": model, "messages": MESSAGES}


def _payloads(protocol: str, body: bytes) -> list[bytes]:
    """The raw JSON payloads of a stream body (SSE data lines, or NDJSON lines)."""
    if protocol == "ollama":
        return [line for line in body.splitlines() if line.strip()]
    return [line[6:] for line in body.replace(b"\r\n", b"\n").split(b"\n") if line.startswith(b"data: ")]


def _decoded(protocol: str, body: bytes) -> list[Any]:
    out = []
    for raw in _payloads(protocol, body):
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            out.append(raw if raw == b"[DONE]" else None)
    return out


def _complete(protocol: str, items: list[Any]) -> bool:
    """Whether the stream carries its protocol's completion signal."""
    last = items[-1] if items else None
    if protocol in ("openai", "azure"):
        return last == b"[DONE]"
    if not isinstance(last, dict):
        return False
    if protocol == "responses":
        return last.get("type") in ("response.completed", "response.incomplete")
    if protocol == "anthropic":
        return last.get("type") == "message_stop"
    if protocol == "gemini":
        return "finishReason" in (last.get("candidates") or [{}])[0]
    return last.get("done") is True


def _has_error(protocol: str, items: list[Any]) -> bool:
    last = items[-1] if items else None
    if not isinstance(last, dict):
        return False
    if protocol == "responses":
        return last.get("type") == "response.failed"
    if protocol == "anthropic":
        return last.get("type") == "error"
    return "error" in last


PROTOCOLS = ["openai", "azure", "responses", "anthropic", "gemini", "ollama"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("model", "complete"),
    [("sim-ok", True), ("sim-empty", True), ("sim-refusal", True), ("sim-thinkonly", True), ("sim-cut-a2", False)],
)
async def test_completion_signal(wire: Any, protocol: str, model: str, complete: bool) -> None:
    """Complete answers end with the protocol's signal; a cut stream ends without it."""
    path, body = _request(protocol, model)
    r = await wire.post(path, body)
    assert r.status == 200
    items = _decoded(protocol, r.body)
    assert None not in items
    assert _complete(protocol, items) is complete


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_inband_error_ends_the_stream(wire: Any, protocol: str) -> None:
    """An in-band error is the last thing in the stream and no completion signal precedes it."""
    path, body = _request(protocol, "sim-inband-a2")
    items = _decoded(protocol, (await wire.post(path, body)).body)
    assert _has_error(protocol, items)
    assert not _complete(protocol, items[:-1])


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_malformed_chunk_then_the_rest(wire: Any, protocol: str) -> None:
    """Exactly one payload is invalid JSON, and the stream still completes after it."""
    path, body = _request(protocol, "sim-malformed-a1")
    items = _decoded(protocol, (await wire.post(path, body)).body)
    assert items.count(None) == 1
    assert _complete(protocol, items)


@pytest.mark.parametrize(
    ("protocol", "complete"),
    [
        ("openai", False),  # finish_reason is there, [DONE] is not (complete: a finish reason ends an OpenAI stream)
        ("azure", False),
        ("anthropic", False),  # message_delta without message_stop is NOT complete
        ("responses", True),  # no separate terminator to leave out
        ("gemini", True),
        ("ollama", True),
    ],
)
async def test_missing_done(wire: Any, protocol: str, complete: bool) -> None:
    """sim-nodone drops only a separate terminator: [DONE] or message_stop."""
    path, body = _request(protocol, "sim-nodone")
    items = _decoded(protocol, (await wire.post(path, body)).body)
    assert _complete(protocol, items) is complete
    if protocol in ("openai", "azure"):
        assert items[-1]["choices"][0]["finish_reason"] == "stop"
    if protocol == "anthropic":
        assert items[-1]["delta"]["stop_reason"] == "end_turn"
