"""The provider contract: convenience methods written once, prompt-guided tools, streaming default."""

from __future__ import annotations

import pytest

from fakes import WEATHER
from turnout.core.errors import StreamingUnsupported
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, PromptGuidedTools


class Echo(Provider):
    """Records requests; answers with a canned text."""

    def __init__(self, answer: str = "ok", native: bool = False) -> None:
        self.requests: list[ChatRequest] = []
        self.answer = answer
        self.native = native

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(text=self.answer, model=model)

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(native_tools=self.native)


async def test_chat_with_system_puts_system_first() -> None:
    """chat_with_system sends a system message then the user message."""
    p = Echo()
    assert await p.chat_with_system("be brief", "hi", "m") == "ok"
    assert [(m.role, m.text) for m in p.requests[0].messages] == [("system", "be brief"), ("user", "hi")]


async def test_chat_with_history_accepts_dicts() -> None:
    """chat_with_history takes OpenAI-style dicts."""
    p = Echo()
    await p.chat_with_history([{"role": "user", "content": "a"}], "m")
    assert p.requests[0].messages[0].text == "a"


async def test_native_tools_pass_through() -> None:
    """A native-tool provider receives the tools untouched."""
    p = Echo(native=True)
    await p.chat_with_tools([{"role": "user", "content": "x"}], [WEATHER], "m")
    assert p.requests[0].tools == (WEATHER,)


async def test_prompt_guided_tools_for_non_native_providers() -> None:
    """Without native tools the instructions join the system prompt and <tool_call> blocks are parsed."""
    p = Echo(answer='Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    resp = await p.chat_with_tools(
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "x"}], [WEATHER], "m"
    )
    sent = p.requests[0]
    assert sent.tools == ()
    assert sent.messages[0].text.startswith("sys\n\n## Tool Use Protocol")
    assert "get_weather" in sent.messages[0].text
    assert resp.text == "Sure."
    assert [(c.name, c.parsed_arguments()) for c in resp.tool_calls] == [("get_weather", {"city": "Oslo"})]


async def test_default_stream_is_unsupported() -> None:
    """A provider that does not stream says so with a typed error."""
    with pytest.raises(StreamingUnsupported):
        async for _ in Echo().stream(ChatRequest.of("hi"), "m"):
            pass


def test_default_convert_tools_is_prompt_guided() -> None:
    """A provider without its own conversion describes tools in the prompt."""
    assert isinstance(Echo().convert_tools([WEATHER]), PromptGuidedTools)
