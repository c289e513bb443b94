"""Where OpenAI-compatible vendors differ from OpenAI Chat Completions, in one place.

The Chat Completions adapter (:mod:`turnout.providers.openai_chat`) speaks one protocol for OpenAI and every
compatible vendor; the differences it has to absorb live here as small pure functions:

- usage: cached prompt tokens as ``prompt_tokens_details.cached_tokens`` or DeepSeek's
  ``prompt_cache_hit_tokens``; xAI's ``completion_tokens`` that leave reasoning tokens out (detected from
  ``total_tokens``); Groq's copy in ``x_groq.usage``;
- content: Mistral's ``content`` as an array of ``text`` / ``thinking`` parts instead of a string;
- finish reasons: ``function_call`` and vendors that answer ``stop`` next to tool calls;
- error bodies: OpenAI ``{"error": {"message", "type", "param", "code"}}``, OpenRouter's integer ``code``
  and wrapped upstream ``metadata.raw``, Azure's string codes with ``innererror.code``, Mistral's
  ``{"detail": ...}`` / ``{"message": ...}`` (sometimes a validation list), and non-JSON pages.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    MAX_PROVIDER_COUNT,
    Usage,
    provider_count,
)
from turnout.providers.base import body_excerpt

#: Longest provider text kept from a nested or wrapped error message.
_MAX_NESTED = 500


def usage_from(raw: Mapping[str, Any]) -> Usage:
    """Normalise a Chat Completions ``usage`` object (any vendor's) into :class:`Usage`.

    ``input_tokens`` includes cached input: OpenAI, DeepSeek and xAI count cached tokens inside
    ``prompt_tokens``; a vendor reporting more cached than prompt tokens evidently counted them apart,
    so they are added. xAI leaves reasoning tokens out of ``completion_tokens`` (its ``total_tokens`` is
    prompt + completion + reasoning), OpenAI counts them in; the total tells which.
    """
    prompt = raw.get("prompt_tokens")
    completion = raw.get("completion_tokens")
    clamped = False
    # plain counts in range skip the bounding call (most answers)
    if type(prompt) is not int or not 0 <= prompt <= MAX_PROVIDER_COUNT:
        prompt, clamped = provider_count(prompt)
    if type(completion) is not int or not 0 <= completion <= MAX_PROVIDER_COUNT:
        completion, bad = provider_count(completion)
        clamped = clamped or bad
    details = raw.get("prompt_tokens_details")
    out_details = raw.get("completion_tokens_details")
    if details is None and out_details is None and "prompt_cache_hit_tokens" not in raw:
        # No cache or reasoning counts (many compatible servers): nothing below would change the two counts.
        if clamped:
            return Usage(input_tokens=prompt, output_tokens=completion, clamped=True)
        return Usage(input_tokens=prompt, output_tokens=completion)
    cached = cache_write = reasoning = 0
    counts: list[tuple[int, bool]] = []
    if details is not None and isinstance(details, dict):
        counts += [provider_count(details.get("cached_tokens")), provider_count(details.get("cache_write_tokens"))]
        (cached, _), (cache_write, _) = counts
    if not cached and "prompt_cache_hit_tokens" in raw:
        counts.append(provider_count(raw["prompt_cache_hit_tokens"]))
        cached = counts[-1][0]
    if out_details is not None and isinstance(out_details, dict):
        counts.append(provider_count(out_details.get("reasoning_tokens")))
        reasoning = counts[-1][0]
    clamped = clamped or any(bad for _, bad in counts)
    total = raw.get("total_tokens")
    if reasoning and isinstance(total, int) and total == prompt + completion + reasoning:
        completion += reasoning
    return Usage(
        input_tokens=prompt if cached <= prompt else prompt + cached,
        output_tokens=completion,
        cached_input_tokens=cached,
        cache_write_tokens=cache_write,
        clamped=clamped,
    )


def chunk_usage(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The usage a chunk carries: ``usage``, else Groq's ``x_groq.usage`` (None when there is none)."""
    usage = chunk.get("usage")
    if usage is not None:
        return usage if isinstance(usage, dict) else None
    groq = chunk.get("x_groq")
    if groq is not None and isinstance(groq, dict):
        usage = groq.get("usage")
        if isinstance(usage, dict):
            return usage
    return None


def unified_finish(raw: str | None, has_tool_calls: bool) -> str:
    """A provider finish reason as one of ``stop`` / ``tool_calls`` / ``length``.

    ``content_filter`` and ``error`` never get here: the adapter raises for them. Some vendors finish with
    ``stop`` (or a value of their own) next to tool calls; the calls decide then.
    """
    if raw == "length":
        return FINISH_LENGTH
    if raw in ("tool_calls", "function_call") or has_tool_calls:
        return FINISH_TOOL_CALLS
    return FINISH_STOP


def content_parts(parts: list[Any]) -> Iterator[tuple[bool, str]]:
    """Mistral's array content as ``(is_reasoning, text)`` pieces, empty ones left out.

    ``{"type": "text", "text": ...}`` is answer text; ``{"type": "thinking", "thinking": [{"type": "text",
    "text": ...}]}`` (Magistral) is reasoning. Other part types (references, images) carry no text.
    """
    for part in parts:
        if isinstance(part, str):
            if part:
                yield False, part
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if isinstance(text, str) and text:
                yield False, text
        elif kind == "thinking":
            thinking = part.get("thinking")
            if isinstance(thinking, str):
                if thinking:
                    yield True, thinking
            elif isinstance(thinking, list):
                for inner in thinking:
                    text = inner.get("text") if isinstance(inner, Mapping) else inner
                    if isinstance(text, str) and text:
                        yield True, text


def _text(value: Any) -> str:
    """A message field as text: strings as they are, Mistral's validation lists as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()[:_MAX_NESTED]
    except TypeError:
        return str(value)[:_MAX_NESTED]


def _code(value: Any) -> str | None:
    """An error ``code`` as text (OpenRouter and Mistral send integers, OpenAI strings or null)."""
    if type(value) is str:
        return value or None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        return str(value) or None
    return None


def _unwrap_raw(raw: str) -> tuple[str, str | None, str | None]:
    """OpenRouter's ``metadata.raw`` (the upstream body as a string): its message, type and code."""
    try:
        inner = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:_MAX_NESTED], None, None
    if isinstance(inner, list) and inner:
        inner = inner[0]
    err = inner.get("error") if isinstance(inner, Mapping) else None
    if not isinstance(err, Mapping):
        return raw[:_MAX_NESTED], None, None
    etype = err.get("type") if isinstance(err.get("type"), str) else err.get("status")
    return (
        _text(err.get("message"))[:_MAX_NESTED],
        etype if isinstance(etype, str) else None,
        _code(err.get("code")),
    )


def facts_from_object(data: Mapping[str, Any], *, status: int | None, headers: Mapping[str, str]) -> ErrorFacts:
    """What a decoded error object says, whichever vendor shape it has.

    Args:
        data: The decoded body (or stream chunk) holding the error.
        status: The HTTP status (None for an error inside a 200 stream).
        headers: Response headers, case-insensitive or with lowercased names (retry hints are read from them).
    """
    err = data.get("error")
    if isinstance(err, str):
        etype = data.get("type")
        return ErrorFacts(
            status=status, headers=headers, message=err, error_type=etype if isinstance(etype, str) else None
        )
    source: Mapping[str, Any] = err if isinstance(err, Mapping) else data
    message = _text(source.get("message")) or _text(source.get("detail"))
    etype = source.get("type")
    error_type = etype if isinstance(etype, str) else None
    error_code = _code(source.get("code"))
    reason = None
    inner = source.get("innererror")
    if isinstance(inner, Mapping):
        reason = _code(inner.get("code"))
    meta = source.get("metadata")
    if isinstance(meta, Mapping):
        raw = meta.get("raw")
        if isinstance(raw, str) and raw:
            up_message, up_type, up_code = _unwrap_raw(raw)
            message = f"{message}: {up_message}" if message else up_message
            error_type = error_type or up_type
            if up_code and (error_code is None or error_code.isdigit()):
                error_code = up_code
        name = meta.get("provider_name")
        if isinstance(name, str) and name:
            message = f"{message} (upstream: {name})"
    if status is None and error_code and error_code.isdigit() and 400 <= int(error_code) < 600:
        # OpenRouter in-band errors may carry the upstream HTTP status as an integer code.
        status = int(error_code)
    return ErrorFacts(
        status=status,
        headers=headers,
        error_type=error_type,
        error_code=error_code,
        message=message,
        reason=reason,
    )


def error_facts(status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
    """What an HTTP error response of any OpenAI-compatible vendor says.

    Non-JSON bodies (a proxy's HTML 502 page) become a short readable excerpt.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ErrorFacts(status=status, headers=headers, message=body_excerpt(body))
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, Mapping):
        return ErrorFacts(status=status, headers=headers, message=body_excerpt(body))
    return facts_from_object(data, status=status, headers=headers)
