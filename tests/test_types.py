"""Core value types: message coercion, think-tag stripping, usage arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from turnout.core.attribution import Attempt
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    ImagePart,
    Message,
    NativeRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
    coerce_messages,
    coerce_tools,
    strip_think_tags,
)


def test_openai_style_dicts_become_messages() -> None:
    """OpenAI-style dicts are accepted wherever a message list is."""
    msgs = coerce_messages(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ]
    )
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[1].text == "what is"
    img = msgs[1].images[0]
    assert (img.media_type, img.data, img.detail) == ("image/png", "AAAA", "low")
    assert msgs[2].tool_calls == (ToolCall(id="call_1", name="f", arguments='{"a":1}'),)
    assert msgs[3].tool_call_id == "call_1"


def test_developer_role_is_a_system_message() -> None:
    """The OpenAI ``developer`` role maps to system."""
    assert coerce_messages([{"role": "developer", "content": "x"}])[0].role == "system"


def test_a_bare_prompt_is_one_user_message() -> None:
    """A string is a single user message."""
    assert coerce_messages("hi") == (Message(role="user", content="hi"),)


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "robot", "content": "x"}],
        [42],
        [{"role": "user", "content": 3}],
        [{"role": "user", "content": [{"type": "audio"}]}],
    ],
)
def test_malformed_messages_raise_type_error(bad: list[object]) -> None:
    """A malformed message is a clear TypeError naming its index."""
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        coerce_messages(bad)  # type: ignore[arg-type]


def test_tools_accept_openai_dicts() -> None:
    """OpenAI tool dicts become ToolSpecs."""
    (t,) = coerce_tools(
        [
            {
                "type": "function",
                "function": {"name": "get", "description": "d", "parameters": {"type": "object"}},
            }
        ]
    )
    assert t == ToolSpec(name="get", description="d", parameters={"type": "object"})
    with pytest.raises(TypeError):
        coerce_tools([{"type": "function", "function": {}}])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>plan</think>answer", "answer"),
        ("  <think>a</think> b <think>c</think> d ", "b  d"),
        ("<think>never closed", ""),
        ("before<think>unclosed rest", "before"),
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_strip_think_tags(text: str, expected: str) -> None:
    """Think spans are removed; an unclosed one hides the rest; the result is trimmed."""
    assert strip_think_tags(text) == expected


def test_semantic_emptiness() -> None:
    """No text after stripping think tags and no tool calls is not an answer."""
    assert ChatResponse(text="<think>x</think>").is_semantically_empty
    assert ChatResponse(text="  ").is_semantically_empty
    assert not ChatResponse(text="", tool_calls=(ToolCall(id="1", name="f"),)).is_semantically_empty
    assert not ChatResponse(text="ok").is_semantically_empty


def test_usage_adds_fieldwise() -> None:
    """Usage values add up field by field."""
    total = Usage(input_tokens=10, output_tokens=5, cached_input_tokens=2) + Usage(input_tokens=1, output_tokens=1)
    assert total == Usage(input_tokens=11, output_tokens=6, cached_input_tokens=2)
    assert total.total_tokens == 17


def test_values_are_frozen() -> None:
    """Values cannot be mutated after creation, the records built on every call among them.

    They hash by value: a message or a usage can key a dict.
    """
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReasoningDelta(text="a").text = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ToolCall(id="c", name="f", arguments="{}").name = "g"  # type: ignore[misc]
    per_call = (Message, ChatRequest, NativeRequest, Usage, Attempt)
    assert [c.__name__ for c in per_call if not c.__dataclass_params__.frozen] == []  # type: ignore[attr-defined]
    assert hash(Usage(input_tokens=1)) == hash(Usage(input_tokens=1))
    assert {Message.user("a"): 1}[Message.user("a")] == 1
    assert TextDelta(text="a").type == "text" and TextDelta("a") == TextDelta(text="a")


def test_request_builder_and_prefill_flag() -> None:
    """ChatRequest.of coerces its inputs and reports an assistant prefill."""
    req = ChatRequest.of([{"role": "user", "content": "a"}, {"role": "assistant", "content": "The answer is"}])
    assert req.last_is_assistant_prefill
    assert not ChatRequest.of("hi").last_is_assistant_prefill


def test_image_part_remote_url() -> None:
    """A remote image has no inline data."""
    img = ImagePart(url="https://x/y.png")
    assert (img.is_data_url, img.media_type, img.data) == (False, None, None)
