"""Rate-limit headroom read from OpenAI-style and Anthropic answer headers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from multidict import CIMultiDict

from turnout.headroom import Headroom, read_headroom

NOW = 1_800_000_000.0


def test_openai_headers_give_remaining_limits_and_resets() -> None:
    """OpenAI's x-ratelimit headers: counts, limits, and Go-duration resets from now."""
    headers = CIMultiDict(
        {
            "X-RateLimit-Limit-Requests": "500",
            "X-RateLimit-Remaining-Requests": "499",
            "X-RateLimit-Reset-Requests": "120ms",
            "X-RateLimit-Limit-Tokens": "30000",
            "X-RateLimit-Remaining-Tokens": "29000",
            "X-RateLimit-Reset-Tokens": "6m0s",
        }
    )
    room = read_headroom(headers, NOW)
    assert room == Headroom(
        requests=499,
        tokens=29000,
        requests_reset_at=pytest.approx(NOW + 0.12),  # type: ignore[arg-type]
        tokens_reset_at=NOW + 360,
        request_limit=500,
        token_limit=30000,
        seen_at=NOW,
    )
    assert room is not None and room.exhausted_until is None
    assert room.share_left == pytest.approx(29000 / 30000)


def test_anthropic_headers_take_the_tightest_token_budget_and_rfc3339_resets() -> None:
    """Anthropic's headers: requests, the smallest of the token budgets, and absolute resets."""
    reset = datetime.fromtimestamp(NOW + 30, tz=UTC).isoformat().replace("+00:00", "Z")
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "100",
    }
    room = read_headroom(headers, NOW)
    assert room is not None
    assert (room.requests, room.request_limit, room.tokens, room.token_limit) == (0, 50, 100, 8000)
    assert room.requests_reset_at == pytest.approx(NOW + 30)
    assert room.exhausted_until == pytest.approx(NOW + 30)  # no requests left: unusable until the reset
    assert room.share_left == 0.0


def test_no_headroom_headers_means_none() -> None:
    """An answer without rate-limit headers says nothing about headroom."""
    assert read_headroom({"content-type": "application/json"}, NOW) is None


@pytest.mark.parametrize("bad", ["", "lots", "-3", "1e3"])
def test_a_malformed_value_is_ignored_alone(bad: str) -> None:
    """A provider's odd header value is dropped; the other values still count."""
    room = read_headroom({"x-ratelimit-remaining-requests": bad, "x-ratelimit-remaining-tokens": "7"}, NOW)
    assert room is not None and room.requests is None and room.tokens == 7


def test_an_exhausted_budget_without_a_known_reset_gives_no_deadline() -> None:
    """Nothing left but no reset time: the walk cannot know how long to wait, so it sets no cooldown."""
    room = read_headroom({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, NOW)
    assert room is not None and room.requests == 0 and room.exhausted_until is None


def test_describe_reports_resets_relative_to_now() -> None:
    """The status form gives seconds until each reset and the age of the reading."""
    room = Headroom(requests=3, requests_reset_at=NOW + 10, request_limit=10, seen_at=NOW - 2)
    assert room.describe(NOW) == {
        "requests": 3,
        "request_limit": 10,
        "requests_reset_in": 10.0,
        "tokens": None,
        "token_limit": None,
        "tokens_reset_in": None,
        "age": 2.0,
    }
