"""Token estimates where no count is known: a prompt's input, what an abandoned answer generated, a worst case.

About four characters of text per token, plus a few tokens per message: close enough for a client that budgets
its context (the gateway's ``count_tokens`` answers with it when the upstream has no count of its own), and for
billing what a provider never reported. A usage built here is marked ``estimated`` (:class:`~turnout.core.types.Usage`),
and the ledger says so.

- A stream that ends without its final usage (the consumer hung up, the stream was cut, the gateway shut down)
  is billed for the input estimate and the text it delivered (:func:`delivered_usage`); a usage the provider sent
  part-way (Anthropic's ``message_start``) counts when it says more.
- A non-streaming call abandoned before its answer (the caller timed out) is billed for what its provider reports
  once the upstream call under way ends (the client lets it finish, see :meth:`turnout.Client.chat`); only when
  that cannot be known (the call was cut at shutdown) is it billed for the input estimate and the most it could
  have generated (:func:`unseen_usage`): nothing of its output was seen, and the provider bills what it generated.
- A completed answer is billed for the provider's usage as far as it is believable (:func:`billed_usage`, the one
  rule every adapter's answer goes through when its attempt is recorded): a usage that is missing or unusable (no
  count at all, or a count the adapter clamped to 0 from garbage) is replaced by the estimate of the prompt and of
  the text delivered, marked ``estimated``; a count beyond what the request allowed (:func:`usage_ceiling`) is
  bounded, marked ``clamped``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from turnout.core.streams import ResponseBuilder
from turnout.core.types import ChatRequest, ChatResponse, Message, ToolSpec, Usage

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
#: The output tokens a call is assumed able to generate when neither the request nor its profile bounds them.
DEFAULT_OUTPUT_BOUND = 32_768
#: The output bound a gateway call with a spend limit is sent when neither the request nor its route's profiles set
#: one: the smallest output limit of the chat models in common use (and the Anthropic adapter's own default), so no
#: upstream refuses it, and a reservation a key's limit can afford.
LIMITED_OUTPUT_BOUND = 4_096
#: A reported input count is believed up to this many times the prompt's estimate (plus :data:`INPUT_SLACK`) when the
#: model's context window is unknown: the estimate counts four characters a token, an image as 85 tokens, and a
#: provider may count one character of some scripts as a token, or an image as a thousand and more.
INPUT_ESTIMATE_FACTOR = 32
#: What a provider may add around any prompt (its own instructions for tools, the framing of each message).
INPUT_SLACK = 1_024
#: The most choices one request is believed to ask for (OpenAI Chat's ``n`` goes up to 128).
MAX_CHOICES = 128


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
    output = delivered_tokens(request, builder)
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
    """What a non-streaming call cut before its answer, its provider's usage unknown, is billed.

    The input estimate and the output bound of every choice it asked for (:func:`choices`): the provider bills what
    it generated, none of which was seen.
    """
    return Usage(
        input_tokens=estimate_tokens(request.messages, request.tools),
        output_tokens=output_bound(request, profile_max_tokens) * choices(request),
        estimated=True,
    )


def opening_usage(request: ChatRequest) -> Usage:
    """What a stream abandoned before its first event is billed: the input estimate (nothing was generated yet)."""
    return Usage(input_tokens=estimate_tokens(request.messages, request.tools), estimated=True)


def delivered_tokens(request: ChatRequest, delivered: ChatResponse | ResponseBuilder) -> int:
    """An estimate of the output tokens of what was delivered: the text, the reasoning and the tool calls.

    Turnout reads one answer; a request for several (:func:`choices`) counts each as long as the one read.
    """
    if isinstance(delivered, ResponseBuilder):
        chars = sum(map(len, delivered.text_parts)) + len(delivered.reasoning)
    else:
        chars = len(delivered.text) + len(delivered.reasoning or "")
    chars += sum(len(c.name) + len(c.arguments) for c in delivered.tool_calls)
    return -(-chars // CHARS_PER_TOKEN) * choices(request)


def choices(request: ChatRequest) -> int:
    """How many answers ``request`` asks for: an OpenAI Chat body's ``n`` passed through as it came, else 1."""
    native = request.native
    if native is None or native.protocol != "openai-chat":
        return 1
    n = native.body.get("n")
    return min(n, MAX_CHOICES) if type(n) is int and n > 1 else 1


@dataclass(frozen=True, slots=True)
class UsageCeiling:
    """The most a provider's counts for one request are believed (:func:`usage_ceiling`).

    Attributes:
        input_tokens: The most input tokens (the whole prompt, cached part included).
        output_tokens: The most output tokens (every choice's).
    """

    input_tokens: int
    output_tokens: int


def output_ceiling(request: ChatRequest, profile_max_tokens: int | None = None) -> int:
    """The most output tokens an answer to ``request`` is believed to have: its output bound for every choice."""
    return output_bound(request, profile_max_tokens) * choices(request)


def usage_ceiling(
    request: ChatRequest, profile_max_tokens: int | None = None, context_window: int | None = None
) -> UsageCeiling:
    """What a provider may report for ``request`` at the most.

    Output: :func:`output_ceiling`. Input: the model's context window when it is known, else
    :data:`INPUT_ESTIMATE_FACTOR` times the prompt's estimate plus :data:`INPUT_SLACK` (also the floor under a known
    window, which a catalogue may state smaller than a model's largest).
    """
    estimate = estimate_tokens(request.messages, request.tools)
    ceiling = INPUT_ESTIMATE_FACTOR * estimate + INPUT_SLACK
    if context_window is not None and context_window > ceiling:
        ceiling = context_window
    return UsageCeiling(input_tokens=ceiling, output_tokens=output_ceiling(request, profile_max_tokens))


def unusable(usage: Usage | None) -> bool:
    """Whether a completed answer's usage says nothing believable: missing, every count 0, or a count clamped to 0.

    A count the adapter clamped (:func:`~turnout.core.types.provider_count`) that came out 0 was negative or not a
    number: it says nothing of what the provider billed.
    """
    if usage is None:
        return True
    if usage.clamped:
        return not usage.input_tokens or not usage.output_tokens
    return not usage.input_tokens and not usage.output_tokens


def bounded_usage(usage: Usage, ceiling: UsageCeiling) -> Usage:
    """``usage`` with each count bounded by ``ceiling`` (cached and written input by the input), marked ``clamped``.

    Returns ``usage`` itself when nothing is bounded.
    """
    input_tokens = min(usage.input_tokens, ceiling.input_tokens)
    output = min(usage.output_tokens, ceiling.output_tokens)
    cached = min(usage.cached_input_tokens, input_tokens)
    written = min(usage.cache_write_tokens, input_tokens - cached)
    if (
        input_tokens == usage.input_tokens
        and output == usage.output_tokens
        and cached == usage.cached_input_tokens
        and written == usage.cache_write_tokens
    ):
        return usage
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        clamped=True,
        estimated=usage.estimated,
    )


def billed_usage(
    request: ChatRequest,
    reported: Usage | None,
    delivered: ChatResponse | ResponseBuilder | None = None,
    *,
    profile_max_tokens: int | None = None,
    context_window: int | None = None,
) -> Usage | None:
    """What an attempt answering ``request`` is billed for its ``reported`` usage.

    ``delivered``: the completed answer (or the events that made it). Its usage, when :func:`unusable`, is replaced
    by an estimate, marked ``estimated``: a count that is 0 becomes the prompt's estimate (input) or the estimate
    of what was delivered (output); a believable count is kept. Every count the provider reported is bounded by
    :func:`usage_ceiling`, marked ``clamped`` (an estimate of what was delivered is not: it was seen). Without
    ``delivered`` (an answer that did not complete), a usage is only bounded, and None stays None.
    """
    if delivered is not None and unusable(reported):
        input_estimate = estimate_tokens(request.messages, request.tools)
        output_estimate = delivered_tokens(request, delivered)
        if reported is None:
            return Usage(input_tokens=input_estimate, output_tokens=output_estimate, estimated=True)
        ceiling = usage_ceiling(request, profile_max_tokens, context_window)
        cache = min(reported.cached_input_tokens + reported.cache_write_tokens, ceiling.input_tokens)
        filled = Usage(
            input_tokens=reported.input_tokens or max(input_estimate, cache),
            output_tokens=reported.output_tokens or output_estimate,
            cached_input_tokens=reported.cached_input_tokens,
            cache_write_tokens=reported.cache_write_tokens,
            clamped=reported.clamped,
            estimated=True,
        )
        return bounded_usage(filled, UsageCeiling(ceiling.input_tokens, max(ceiling.output_tokens, output_estimate)))
    if reported is None:
        return None
    if _plainly_within(request, reported, profile_max_tokens, context_window):
        return reported
    return bounded_usage(reported, usage_ceiling(request, profile_max_tokens, context_window))


def _plainly_within(
    request: ChatRequest, usage: Usage, profile_max_tokens: int | None, context_window: int | None
) -> bool:
    """Whether ``usage`` is within its ceiling, known without estimating the prompt (most answers are)."""
    input_tokens = usage.input_tokens
    return (
        usage.output_tokens <= output_bound(request, profile_max_tokens)
        and usage.cached_input_tokens + usage.cache_write_tokens <= input_tokens
        and (
            (context_window is not None and input_tokens <= context_window)
            # the least the estimate's ceiling can be: every message counts TOKENS_PER_MESSAGE
            or input_tokens <= INPUT_ESTIMATE_FACTOR * TOKENS_PER_MESSAGE * len(request.messages) + INPUT_SLACK
        )
    )


def embedding_usage(reported: Usage | None, estimate: int) -> Usage:
    """What an embedding batch is billed for its ``reported`` usage, given the estimate of its inputs' tokens.

    A usage that is missing or counts no input is the estimate, marked ``estimated``; an input count beyond
    :data:`INPUT_ESTIMATE_FACTOR` times the estimate plus :data:`INPUT_SLACK` is bounded there, marked ``clamped``.
    """
    if reported is None or not reported.input_tokens:
        return Usage(input_tokens=estimate, estimated=True)
    ceiling = INPUT_ESTIMATE_FACTOR * estimate + INPUT_SLACK
    if reported.input_tokens <= ceiling and not reported.output_tokens:
        return reported
    return Usage(input_tokens=min(reported.input_tokens, ceiling), clamped=True, estimated=reported.estimated)
