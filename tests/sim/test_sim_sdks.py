"""The official openai and anthropic SDKs parse the simulator's answers without error."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
MESSAGES: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def _openai(sim: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url("openai"), api_key="sk-test", max_retries=0)


def _anthropic(sim: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sim.base_url("anthropic"), api_key="sk-ant-test", max_retries=0)


async def test_openai_sdk_parses_chat_completion(sim: Any) -> None:
    """openai.AsyncOpenAI parses a non-stream chat completion with usage."""
    async with _openai(sim) as client:
        completion = await client.chat.completions.create(model="gpt-4.1", messages=MESSAGES)
    assert completion.choices[0].message.content == "Hello from the Turnout simulator."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (6, 5)


async def test_openai_sdk_parses_stream_with_usage(sim: Any) -> None:
    """The SDK's raw chunk stream yields the text, the finish reason and the usage chunk."""
    async with _openai(sim) as client:
        stream = await client.chat.completions.create(
            model="gpt-4.1", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        text, finish, usage = "", None, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                usage = chunk.usage
    assert text == "Hello from the Turnout simulator."
    assert finish == "stop"
    assert usage is not None
    assert usage.completion_tokens == 5


async def test_openai_sdk_stream_helper_assembles_tool_calls(sim: Any) -> None:
    """client.chat.completions.stream() assembles streamed tool calls into parsed arguments."""
    async with (
        _openai(sim) as client,
        client.chat.completions.stream(model="sim-ok-tc2", messages=MESSAGES, tools=[TOOL]) as stream,
    ):
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Hello from the Turnout simulator."
    assert message.tool_calls is not None
    assert [orjson.loads(c.function.arguments) for c in message.tool_calls] == [
        {"city": "Paris"},
        {"city": "Tokyo", "unit": "celsius"},
    ]
    assert final.choices[0].finish_reason == "tool_calls"


async def test_openai_sdk_parses_responses_call_and_stream(sim: Any) -> None:
    """client.responses.create() parses a response, and its stream ends in response.completed."""
    async with _openai(sim) as client:
        response = await client.responses.create(model="gpt-4.1", input="Say hello")
        assert response.output_text == "Hello from the Turnout simulator."
        assert response.usage is not None
        assert response.usage.output_tokens == 5
        async with client.responses.stream(model="sim-ok-r2-tc1", input="Say hello") as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == "Hello from the Turnout simulator."
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]


async def test_anthropic_sdk_parses_message(sim: Any) -> None:
    """anthropic.AsyncAnthropic parses a non-stream message with thinking and tool use."""
    async with _anthropic(sim) as client:
        message = await client.messages.create(model="sim-ok-r2-tc1", max_tokens=100, messages=MESSAGES)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 8


async def test_anthropic_sdk_stream_helper(sim: Any) -> None:
    """client.messages.stream() accumulates thinking, text and tool input into the final message."""
    async with (
        _anthropic(sim) as client,
        client.messages.stream(model="sim-ok-r2-tc1", max_tokens=100, messages=MESSAGES) as stream,
    ):
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Hello from the Turnout simulator."
    thinking, text_block, tool = final.content
    assert text_block.type == "text"
    assert thinking.type == "thinking"
    assert thinking.thinking == "lorem ipsum"
    assert tool.type == "tool_use"
    assert tool.input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 8


async def test_anthropic_sdk_raw_stream(sim: Any) -> None:
    """messages.create(stream=True) yields every event through message_stop."""
    async with _anthropic(sim) as client:
        stream = await client.messages.create(model="sim-ok", max_tokens=100, messages=MESSAGES, stream=True)
        types = [event.type async for event in stream]
    assert types[0] == "message_start"
    assert types[-1] == "message_stop"


async def test_sdk_keys_are_logged_by_id(sim: Any) -> None:
    """Both SDKs' keys (Bearer and x-api-key) are logged as key ids, never in clear."""
    from turnout.core.secrets import key_id

    async with _openai(sim) as client:
        await client.chat.completions.create(model="gpt-4.1", messages=MESSAGES)
    async with _anthropic(sim) as client:
        await client.messages.create(model="claude", max_tokens=10, messages=MESSAGES)
    assert [e.key_id for e in sim.log] == [key_id("sk-test"), key_id("sk-ant-test")]
