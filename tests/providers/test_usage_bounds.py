"""Every adapter bounds a provider's counts where it parses them, with the one bounding function, and marks it."""

from __future__ import annotations

from typing import Any

import pytest
from provider_kit import make_adapter

from turnout.core.types import MAX_PROVIDER_COUNT, provider_count
from turnout.providers.anthropic import normalise_usage as anthropic_usage
from turnout.providers.gemini import gemini_usage
from turnout.providers.http import HttpClient
from turnout.providers.openai_compat import usage_from
from turnout.providers.openai_responses import normalise_usage as responses_usage

NONSENSE: dict[str, tuple[Any, int]] = {
    "2**64-1": (2**64 - 1, MAX_PROVIDER_COUNT),
    "2**53+1": (2**53 + 1, MAX_PROVIDER_COUNT),
    "1e300": (1e300, MAX_PROVIDER_COUNT),
    "fraction": (12.7, 12),
    "negative": (-3, 0),
    "nan": (float("nan"), 0),
    "infinity": (float("inf"), 0),
    "text": ("12", 0),
    "boolean": (True, 0),
    "object": ({"n": 1}, 0),
}


@pytest.mark.parametrize(("value", "bounded"), NONSENSE.values(), ids=NONSENSE.keys())
def test_a_count_outside_the_range_or_not_a_whole_number_is_clamped_and_marked(value: Any, bounded: int) -> None:
    """Anything but a whole number in 0..2**53 is clamped into the range and reported as clamped."""
    assert provider_count(value) == (bounded, True)


@pytest.mark.parametrize("value", [0, 1, 4096, MAX_PROVIDER_COUNT])
def test_a_whole_number_in_range_is_kept_and_a_missing_one_is_zero(value: int) -> None:
    """A plain count is kept as it is, unmarked; a missing count (null) is 0, unmarked."""
    assert provider_count(value) == (value, False)
    assert provider_count(None) == (0, False)


@pytest.mark.parametrize(("value", "bounded"), NONSENSE.values(), ids=NONSENSE.keys())
def test_every_adapter_bounds_and_marks_its_usage(value: Any, bounded: int) -> None:
    """OpenAI Chat (and compatible), Responses, Anthropic, Gemini and Ollama usages with a nonsense input count
    come out bounded and marked clamped; the good output count is kept.
    """
    usages = [
        usage_from({"prompt_tokens": value, "completion_tokens": 5}),
        usage_from({"prompt_tokens": value, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}),
        responses_usage({"input_tokens": value, "output_tokens": 5}),
        anthropic_usage({"input_tokens": value, "output_tokens": 5}),
        gemini_usage({"promptTokenCount": value, "candidatesTokenCount": 5}),
    ]
    ollama = make_adapter(HttpClient(), "ollama", "http://127.0.0.1:9")
    body = {"message": {"role": "assistant", "content": "x"}, "done": True, "prompt_eval_count": value, "eval_count": 5}
    reply = ollama.parse_response(body, "m")
    assert reply.usage is not None
    usages.append(reply.usage)
    for usage in usages:
        assert usage.input_tokens == bounded and usage.output_tokens == 5 and usage.clamped


def test_a_plain_usage_is_not_marked() -> None:
    """A usage of plain counts is not marked clamped, by any adapter."""
    assert not usage_from({"prompt_tokens": 3, "completion_tokens": 5}).clamped
    assert not responses_usage({"input_tokens": 3, "output_tokens": 5}).clamped
    assert not anthropic_usage({"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 1}).clamped
    assert not gemini_usage({"promptTokenCount": 3, "candidatesTokenCount": 5}).clamped
