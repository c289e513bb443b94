"""A client's model name never chooses the upstream path: escaped in every adapter, refused where it cannot fit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from provider_kit import RecordingServer, Reply, make_adapter

from turnout.config import load_config_dict
from turnout.core.errors import ErrorClass, ProviderError
from turnout.core.types import ChatRequest
from turnout.providers import HttpClient, model_problem

HOSTILE = ["../../../admin?x=", "a/b", "a#frag", "..", "gemini:evil", "a\\b", "x\ny", "a%2F..%2Fb"]
ANSWER = {
    "openai": {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]},
    "anthropic": {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"},
    "ollama": {"message": {"role": "assistant", "content": "hi"}, "done": True, "done_reason": "stop"},
    "responses": {
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
    },
}
#: family, extra profile keys, the path the upstream must receive whatever the model, the answer it gets.
BODY_FAMILIES: list[tuple[str, dict[str, Any], str, str]] = [
    ("openai", {}, "/v1/chat/completions", "openai"),
    ("openai", {"wire_api": "responses"}, "/v1/responses", "responses"),
    ("openrouter", {}, "/v1/chat/completions", "openai"),
    ("anthropic", {}, "/v1/messages", "anthropic"),
    ("ollama", {}, "/api/chat", "ollama"),
]


@pytest.mark.parametrize(("family", "extra", "path", "answer"), BODY_FAMILIES)
@pytest.mark.parametrize("model", [*HOSTILE, "openai/gpt-4o"])
async def test_body_protocols_keep_their_path_whatever_the_model(
    server: RecordingServer, http: HttpClient, family: str, extra: dict[str, Any], path: str, answer: str, model: str
) -> None:
    """Protocols that carry the model in the JSON body send it there, verbatim, and keep their fixed path."""
    server.reply(Reply(pieces=(orjson.dumps(ANSWER[answer]),)))
    adapter = make_adapter(http, family, server.url + "/v1", **extra)
    await adapter.chat(ChatRequest.of("hi"), model)
    (seen,) = server.requests
    assert seen.raw_path == path
    assert seen.query == {}
    assert seen.body["model"] == model


@pytest.mark.parametrize("model", HOSTILE)
async def test_gemini_refuses_a_model_that_would_leave_its_path_segment(
    server: RecordingServer, http: HttpClient, model: str
) -> None:
    """A Gemini model with '/', '?', '#', '..', ':' or a control character is refused before any request."""
    adapter = make_adapter(http, "gemini", server.url + "/v1beta")
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest.of("hi"), model)
    assert info.value.error_class is ErrorClass.NON_RETRYABLE
    assert server.requests == []


async def test_gemini_escapes_the_model_segment(server: RecordingServer, http: HttpClient) -> None:
    """A Gemini model that may be sent is percent-encoded into exactly one path segment (and models/ is kept)."""
    answer = {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}]}
    server.reply(Reply(pieces=(orjson.dumps(answer),)), Reply(pieces=(orjson.dumps(answer),)))
    adapter = make_adapter(http, "gemini", server.url + "/v1beta")
    await adapter.chat(ChatRequest.of("hi"), "gem ini@1é")
    await adapter.chat(ChatRequest.of("hi"), "models/gemini-2.5-flash")
    first, second = server.requests
    assert first.raw_path == "/v1beta/models/gem%20ini@1%C3%A9:generateContent"
    assert first.path == "/v1beta/models/gem ini@1é:generateContent"
    assert second.raw_path == "/v1beta/models/gemini-2.5-flash:generateContent"


def test_model_problem_is_per_protocol() -> None:
    """model_problem says why a name cannot go to a profile whose adapter puts it in the URL, else None."""
    cfg = load_config_dict(
        {
            "default_provider": "gemini.g",
            "providers": {
                "models": {
                    "gemini": {"g": {"api_key": "k"}},
                    "openrouter": {"r": {"api_key": "k"}},
                }
            },
        },
        env={},
    )
    profiles = cfg.profiles()
    assert model_problem("gemini.g", profiles["gemini.g"], "gemini-2.5-flash") is None
    assert model_problem("gemini.g", profiles["gemini.g"], "../admin") is not None
    assert model_problem("openrouter.r", profiles["openrouter.r"], "openai/gpt-4o") is None
