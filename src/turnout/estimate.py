"""Token estimates where no count is known: a prompt's input, what an abandoned answer generated, a worst case.

About four characters of text per token, plus a few tokens per message: close enough for a client that budgets
its context (the gateway's ``count_tokens`` answers with it when the upstream has no count of its own), and for
billing what a provider never reported. A usage built here is marked ``estimated`` (:class:`~turnout.types.Usage`),
and the ledger says so.

- A stream that ends without its final usage (the consumer hung up, the stream was cut, the gateway shut down)
  is billed for the input estimate and the text it delivered (:func:`delivered_usage`); a usage the provider sent
  part-way (Anthropic's ``message_start``) counts when it says more.
- A non-streaming call abandoned before its answer (the caller timed out) is billed for the input estimate and
  the most it could have generated (:func:`unseen_usage`): nothing of its output was seen, and the provider
  bills what it generated.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from turnout.streams import ResponseBuilder
from turnout.types import ChatRequest, Message, ToolSpec, Usage

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
#: The output tokens a call is assumed able to generate when neither the request nor its profile bounds them.
DEFAULT_OUTPUT_BOUND = 32_768


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """An estimate of the input tokens of a prompt (at least 1)."""
    chars = 0
    for m in messages:
        chars += len(m.text)
        for call in m.tool_calls:
            chars += len(call.name) + len(call.arguments)
        chars += 85 * 4 * len(m.images)  # an image costs about as much as 85 tokens at the least
    for t in tools:
        chars += len(t.name) + len(t.description) + len(orjson.dumps(dict(t.parameters)))
    return max(1, -(-chars // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages))


def estimate_embedding_tokens(inputs: Sequence[str | Sequence[int]]) -> int:
    """An estimate of the tokens of embedding inputs: a text's by its characters, a token array's by its length."""
    tokens = 0
    for item in inputs:
        tokens += -(-len(item) // CHARS_PER_TOKEN) if isinstance(item, str) else len(item)
    return max(1, tokens)


def output_bound(request: ChatRequest, profile_max_tokens: int | None = None) -> int:
    """The most output tokens ``request`` can generate: its ``max_tokens``, the profile's, else the default bound."""
    return request.max_tokens or profile_max_tokens or DEFAULT_OUTPUT_BOUND


def delivered_usage(request: ChatRequest, builder: ResponseBuilder) -> Usage:
    """What a stream that ended without its final usage is billed.

    The provider's partial usage, when it says at least as much; else the input estimate (or the provider's input
    count) and the estimate of the output delivered.
    """
    chars = sum(map(len, builder.text_parts)) + len(builder.reasoning)
    chars += sum(len(c.name) + len(c.arguments) for c in builder.tool_calls)
    output = -(-chars // CHARS_PER_TOKEN)
    reported = builder.usage
    if reported is not None and reported.output_tokens >= output:
        return reported
    if reported is not None and reported.input_tokens:
        return Usage(
            input_tokens=reported.input_tokens,
            output_tokens=output,
            cached_input_tokens=reported.cached_input_tokens,
            cache_write_tokens=reported.cache_write_tokens,
            clamped=reported.clamped,
            estimated=True,
        )
    return Usage(input_tokens=estimate_tokens(request.messages, request.tools), output_tokens=output, estimated=True)


def unseen_usage(request: ChatRequest, profile_max_tokens: int | None = None) -> Usage:
    """What a non-streaming call abandoned before its answer is billed: the input estimate and the output bound."""
    return Usage(
        input_tokens=estimate_tokens(request.messages, request.tools),
        output_tokens=output_bound(request, profile_max_tokens),
        estimated=True,
    )


def opening_usage(request: ChatRequest) -> Usage:
    """What a stream abandoned before its first event is billed: the input estimate (nothing was generated yet)."""
    return Usage(input_tokens=estimate_tokens(request.messages, request.tools), estimated=True)
