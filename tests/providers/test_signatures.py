"""Signed thinking goes back only to the family that signed it, in translated requests and pass-through bodies."""

from __future__ import annotations

from typing import Any

from provider_kit import make_adapter

from turnout.core.types import ChatRequest, Message, ToolCall
from turnout.providers import HttpClient
from turnout.providers.anthropic import THINKING_KEY
from turnout.providers.signatures import SIGNER_KEY, replayable_thinking, stamp, stamped_content, unstamp

BLOCK = {"type": "thinking", "thinking": "Paris first.", "signature": "c2ln"}


def history(signer: str, extra_key: str = THINKING_KEY, value: Any = (BLOCK,)) -> ChatRequest:
    call = ToolCall(id="toolu_1", name="weather", arguments="{}", extra={extra_key: value, SIGNER_KEY: signer})
    return ChatRequest(
        messages=(Message.user("Weather?"), Message.assistant("", tool_calls=(call,)), Message.tool("toolu_1", "sun"))
    )


def assistant_types(body: dict[str, Any]) -> list[str]:
    return [b["type"] for b in body["messages"][1]["content"]]


def test_stamps_round_trip_and_the_anthropic_api_needs_none() -> None:
    """A signature is stamped with its signer (the Anthropic API's stays as issued) and read back."""
    assert stamp("vertex", "c2ln") == "tn1!vertex!c2ln" and unstamp("tn1!vertex!c2ln") == ("vertex", "c2ln")
    assert stamp("anthropic", "c2ln") == "c2ln" and unstamp("c2ln") == ("anthropic", "c2ln")
    assert stamp("bedrock", "") == ""
    content = [BLOCK, {"type": "redacted_thinking", "data": "ZGF0YQ=="}, {"type": "text", "text": "hi"}]
    assert stamped_content(content, "vertex") == [
        {**BLOCK, "signature": "tn1!vertex!c2ln"},
        {"type": "redacted_thinking", "data": "tn1!vertex!ZGF0YQ=="},
        {"type": "text", "text": "hi"},
    ]


def test_replayable_thinking_keeps_own_drops_foreign() -> None:
    """Own blocks go back unstamped, foreign ones are left out, an emptied turn keeps its thinking as text."""
    messages = [
        {"role": "assistant", "content": [{**BLOCK, "signature": "tn1!vertex!c2ln"}, {"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [BLOCK]},
    ]
    assert replayable_thinking(messages, "vertex") == [
        {"role": "assistant", "content": [BLOCK, {"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris first."}]},
    ]
    assert replayable_thinking(messages, "anthropic") == [
        {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [BLOCK]},
    ]
    assert (
        replayable_thinking([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [BLOCK]}], "anthropic")
        is None
    )


async def test_translated_history_sends_thinking_only_to_its_signer() -> None:
    """Thinking kept on a tool call from Anthropic goes back to Anthropic profiles, never to a Vertex one."""
    http = HttpClient()
    anthropic = make_adapter(http, "anthropic", "http://127.0.0.1:9")
    vertex = make_adapter(http, "vertex", "http://127.0.0.1:9", api_key=None, project="p", model="claude-sonnet-4-5")
    from_anthropic, from_vertex = history("anthropic"), history("vertex")
    assert assistant_types(anthropic.build_body(from_anthropic, "m", None, False)) == ["thinking", "tool_use"]
    assert assistant_types(vertex.build_body(from_anthropic, "m", None, False)) == ["tool_use"]
    assert assistant_types(vertex.build_body(from_vertex, "m", None, False)) == ["thinking", "tool_use"]
    assert assistant_types(anthropic.build_body(from_vertex, "m", None, False)) == ["tool_use"]
    await http.aclose()


async def test_gemini_thought_signatures_stay_with_their_cloud() -> None:
    """A Gemini API thought signature is not sent to Gemini on Vertex, and the reverse."""
    http = HttpClient()
    gemini = make_adapter(http, "gemini", "http://127.0.0.1:9")
    vertex = make_adapter(http, "vertex", "http://127.0.0.1:9", api_key=None, project="p", model="gemini-2.5-pro")
    req = history("gemini", "thought_signature", "c2ln")

    def parts(adapter: Any) -> list[dict[str, Any]]:
        return adapter.build_body(req, "gemini-2.5-pro", None, False)["contents"][1]["parts"]  # type: ignore[no-any-return]

    assert parts(gemini)[0]["thoughtSignature"] == "c2ln"
    assert "thoughtSignature" not in parts(vertex)[0]
    await http.aclose()
