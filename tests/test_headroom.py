"""Rate-limit headroom read from OpenAI-style and Anthropic answer headers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from multidict import CIMultiDict

from turnout.providers.headroom import LOW_SHARE, Headroom, HeadroomBook, HeadroomWatch, is_tight, read_headroom

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


# --- what is kept, and the cheap test every answer gets ------------------------------------------------


def openai_headers(requests: int, limit: int = 100, reset: str = "30s", tokens: str = "9000") -> dict[str, str]:
    """OpenAI-style headroom headers (lowercase names, as a case-insensitive map would match them)."""
    return {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(requests),
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": "10000",
        "x-ratelimit-remaining-tokens": tokens,
        "x-ratelimit-reset-tokens": "2s",
    }


@pytest.mark.parametrize(
    ("left", "limit", "tight"),
    [
        ("500", "500", False),
        ("100", "500", False),
        ("50", "500", False),  # exactly a tenth is not short
        ("49", "500", True),
        ("0", "500", True),
        ("0", "5", True),
        ("05", "50", False),  # a leading zero takes the exact path: 5 is a tenth of 50
        ("00", "10", True),
        ("0", None, True),  # nothing left: short without a limit
        ("3", None, False),  # some left, no limit: nothing to compare with
        ("lots", "500", False),  # malformed values are ignored
        ("3", "many", False),
    ],
)
def test_is_tight_matches_the_parsed_reading(left: str, limit: str | None, tight: bool) -> None:
    """The count-only test agrees with the full parse on whether a budget is short (< 10 %, or none left)."""
    headers = {"x-ratelimit-remaining-requests": left}
    if limit is not None:
        headers["x-ratelimit-limit-requests"] = limit
    assert is_tight(headers) is tight
    room = read_headroom(headers, NOW)
    assert room is not None
    parsed = room.requests is not None and (
        room.requests <= 0 or (room.request_limit is not None and room.requests < LOW_SHARE * room.request_limit)
    )
    assert parsed is tight


def test_is_tight_reads_every_anthropic_budget() -> None:
    """An Anthropic answer is short when any budget is: requests, tokens, input or output tokens."""
    roomy = {
        "anthropic-ratelimit-requests-remaining": "40",
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-output-tokens-remaining": "7000",
        "anthropic-ratelimit-output-tokens-limit": "8000",
    }
    assert not is_tight(roomy)
    assert is_tight({**roomy, "anthropic-ratelimit-output-tokens-remaining": "700"})


def test_the_book_parses_only_short_readings_and_marks_them_until_they_refill() -> None:
    """A roomy answer is kept as it came and clears the mark; a short one is parsed and marks the key till its reset."""
    book = HeadroomBook("openai.main", max_cooldown=60.0)
    assert book.hear("k1", openai_headers(80), NOW) is None
    assert not book.is_low("k1", NOW)
    room = book.hear("k1", openai_headers(5, reset="20s"), NOW)
    assert room is not None and room.requests == 5
    assert book.is_low("k1", NOW + 19.9)
    assert not book.is_low("k1", NOW + 20)  # refilled: the mark is gone
    book.hear("k1", openai_headers(5, reset="20s"), NOW)
    book.hear("k1", openai_headers(60), NOW + 1)  # room again: cleared at once
    assert not book.is_low("k1", NOW + 1)


def test_a_short_reading_without_a_reset_marks_the_key_at_most_the_cap() -> None:
    """A reading with no usable reset cannot say when it refills: it counts for the cap (an old reading is stale)."""
    book = HeadroomBook("openai.main", max_cooldown=60.0)
    book.hear(None, {"x-ratelimit-remaining-requests": "0"}, NOW)
    assert book.is_low(None, NOW + 59)
    assert not book.is_low(None, NOW + 60)
    book.hear(None, openai_headers(1, reset="6m0s"), NOW)
    assert book.is_low(None, NOW + 59) and not book.is_low(None, NOW + 60)


def test_describe_lists_each_key_with_its_last_reading() -> None:
    """The status rows: profile, key id, whether it is short, and the parsed last reading of each key."""
    book = HeadroomBook("openai.main", max_cooldown=60.0)
    book.hear("bbbb", openai_headers(80), NOW - 1)
    book.hear("aaaa", openai_headers(2, reset="10s"), NOW - 2)
    rows = book.describe(NOW)
    assert [(r["profile"], r["key_id"], r["low"], r["requests"]) for r in rows] == [
        ("openai.main", "aaaa", True, 2),
        ("openai.main", "bbbb", False, 80),
    ]
    assert rows[0]["requests_reset_in"] == 8.0 and rows[0]["age"] == 2.0
    assert book.last("aaaa") == read_headroom(openai_headers(2, reset="10s"), NOW - 2)
    assert book.last("cccc") is None


def test_a_watch_hands_its_key_and_the_headers_to_its_report() -> None:
    """The adapter's watch names its own key, and passes on only answers that name their remaining requests."""
    heard: list[tuple[str | None, dict[str, str]]] = []
    watch = HeadroomWatch("k1", lambda kid, headers: heard.append((kid, dict(headers))))
    anthropic = {"anthropic-ratelimit-requests-remaining": "4", "anthropic-ratelimit-requests-limit": "5"}
    assert watch.seen(openai_headers(3)) is None
    assert watch.seen(anthropic) is None
    assert watch.seen({"content-type": "application/json", "x-ratelimit-limit-requests": "5"}) is None
    assert heard == [("k1", openai_headers(3)), ("k1", anthropic)]
