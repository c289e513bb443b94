"""The provider contract every adapter implements; the reliable walk calls it on each entry's adapters.

A provider needs one method, :meth:`Provider.chat`. Streaming providers also override
:meth:`Provider.stream` and declare it in :meth:`Provider.capabilities`. The convenience
methods (``chat_with_system``, ``chat_with_history``, ``chat_with_tools``) are written once here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from types import TracebackType
from typing import Any

from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.core.errors import StreamingUnsupported, UnsupportedRequest
from turnout.core.tools import parse_prompt_guided_calls, prompt_guided_tools
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    Message,
    PromptGuidedTools,
    StreamEvent,
    ToolsPayload,
    ToolSpec,
    coerce_messages,
    coerce_tools,
)


class Provider(ABC):
    """Something that answers chat requests.

    Subclasses implement :meth:`chat`; streaming ones implement :meth:`stream` too. Providers that
    own connections release them in :meth:`aclose`; all providers are async context managers.
    """

    @abstractmethod
    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """Send one request and return the complete answer.

        Args:
            request: The messages, tools and limits.
            model: The model to ask (a pinned entry may replace it with its pin).
            temperature: Sampling temperature; None leaves it out of the request.

        Raises:
            ProviderError: The call failed; its ``error_class`` says what the failure means.
        """

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream the answer as events, ending with :class:`~turnout.core.types.Final`.

        A stream that ends before its protocol's completion signal raises
        :class:`~turnout.core.errors.StreamTruncated` instead of ending quietly.

        Raises:
            StreamingUnsupported: This provider cannot stream.
        """
        raise StreamingUnsupported(f"{type(self).__name__} does not support streaming")
        yield Final()  # type: ignore[unreachable]  # makes this an async generator

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """The events of :meth:`stream` in non-empty lists, in order.

        Consumers that relay events (the reliable stream, the runtime) read batches so that their
        bookkeeping costs once per batch, not once per event. HTTP adapters override this and return
        what one network read decoded to; the default wraps :meth:`stream`, one event per batch.
        """
        async with aclosing(self.stream(request, model, temperature)) as events:
            async for event in events:
                yield [event]

    def capabilities(self, model: str | None = None) -> Capabilities:
        """What this provider can do for ``model`` (default: nothing beyond plain chat)."""
        return Capabilities()

    def convert_tools(self, tools: Sequence[ToolSpec]) -> ToolsPayload:
        """Tools in this provider's wire shape (default: prompt-guided instructions)."""
        return prompt_guided_tools(tools)

    def embedding_limits(self, model: str | None = None) -> EmbeddingLimits | None:
        """What this provider's embedding endpoint takes for ``model`` (default None: it serves no embeddings)."""
        return None

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        """Embed one batch (within :meth:`embedding_limits`): one vector per input, in order.

        Raises:
            UnsupportedRequest: This provider serves no embeddings (the default).
            ProviderError: The call failed; its ``error_class`` says what the failure means.
        """
        raise UnsupportedRequest(f"{type(self).__name__} does not serve embeddings")

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections and other resources."""

    async def __aenter__(self) -> Provider:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # --- convenience methods, implemented once ---------------------------------

    async def chat_with_system(
        self, system: str | None, message: str, model: str, temperature: float | None = None
    ) -> str:
        """Ask one question with an optional system prompt; return the answer text."""
        messages = [Message.system(system)] if system else []
        messages.append(Message.user(message))
        response = await self.chat(ChatRequest(messages=tuple(messages)), model, temperature)
        return response.text

    async def chat_with_history(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        model: str,
        temperature: float | None = None,
    ) -> str:
        """Send a whole conversation; return the answer text."""
        response = await self.chat(ChatRequest(messages=coerce_messages(messages)), model, temperature)
        return response.text

    async def chat_with_tools(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        tools: Iterable[ToolSpec | Mapping[str, Any]],
        model: str,
        temperature: float | None = None,
    ) -> ChatResponse:
        """Send a conversation with tools.

        When the model has no native tool calling, the tools are described in the system prompt and
        ``<tool_call>`` blocks in the answer are parsed into tool calls.
        """
        request = ChatRequest(messages=coerce_messages(messages), tools=coerce_tools(tools))
        return await chat_using_tools(self, request, model, temperature)


async def flatten(batches: AsyncGenerator[list[StreamEvent], None]) -> AsyncGenerator[StreamEvent, None]:
    """The events of a batch stream one at a time (closing it when the consumer stops)."""
    async with aclosing(batches) as source:
        async for batch in source:
            for event in batch:
                yield event


async def chat_using_tools(
    provider: Provider, request: ChatRequest, model: str, temperature: float | None = None
) -> ChatResponse:
    """``provider.chat``, describing tools in the prompt when the model has no native tool calling."""
    if not request.tools or provider.capabilities(model).native_tools:
        return await provider.chat(request, model, temperature)
    payload = provider.convert_tools(request.tools)
    guided = payload if isinstance(payload, PromptGuidedTools) else prompt_guided_tools(request.tools)
    response = await provider.chat(with_tool_instructions(request, guided.instructions), model, temperature)
    text, calls = parse_prompt_guided_calls(response.text)
    if not calls:
        return response
    return replace(response, text=text, tool_calls=response.tool_calls + calls)


def with_tool_instructions(request: ChatRequest, instructions: str) -> ChatRequest:
    """The request with tools removed and their instructions appended to (or added as) the system prompt."""
    messages = list(request.messages)
    if messages and messages[0].role == "system":
        messages[0] = Message.system(f"{messages[0].text}\n\n{instructions}")
    else:
        messages.insert(0, Message.system(instructions))
    return replace(request, messages=tuple(messages), tools=())
