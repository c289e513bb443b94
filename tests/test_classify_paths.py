"""The failed try's written-out checks hold to the classifier's rules as plain separate functions.

``_classify`` asks the refusal, context-window and retry-hint rules in line (and a 429 skips the phrase scans
only other statuses need), ``scrub`` may be handed the lowercased text, and ``is_dead_key_error`` asks about an
exception first. The reference functions
below are those rules, one function each, in the order SPEC section 5 gives them.
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from turnout.classify import (
    BUSINESS_ERROR_CODES,
    BUSINESS_RATE_LIMIT_HINTS,
    CONTEXT_WINDOW_HINTS,
    KEY_INVALID_REASONS,
    KEY_INVALID_TYPES,
    MODERATION_HINTS,
    NON_RETRYABLE_TYPES,
    RATE_LIMIT_TYPES,
    REFUSAL_CODES,
    REFUSAL_HINTS,
    RETRYABLE_4XX_TYPES,
    RETRYABLE_TYPES,
    TOOL_SCHEMA_HINTS,
    ErrorFacts,
    classify,
    classify_text,
    is_dead_key_error,
    provider_error,
    retry_after_seconds,
)
from turnout.config.secrets import scrub
from turnout.errors import ErrorClass


def _low(s: str | None) -> str:
    return s.lower() if s else ""


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(p in text for p in phrases)


def _ref_refusal(status: int | None, code: str, reason: str, text: str) -> bool:
    if code in REFUSAL_CODES or reason in REFUSAL_CODES:
        return True
    return status in (None, 400) and _has(text, REFUSAL_HINTS)


def _ref_context_window(status: int | None, code: str, text: str) -> bool:
    if code == "context_length_exceeded":
        return True
    if status == 429:
        return False
    if status is not None and not 400 <= status < 500:
        return False
    return _has(text, CONTEXT_WINDOW_HINTS)


def _ref_has_retry_hint(facts: ErrorFacts) -> bool:
    h = facts.headers
    return bool(facts.retry_delay) or "retry-after" in h or "retry-after-ms" in h


def _ref_classify(facts: ErrorFacts) -> ErrorClass:
    status = facts.status
    code, etype, reason, text = _low(facts.error_code), _low(facts.error_type), _low(facts.reason), _low(facts.message)
    if _ref_refusal(status, code, reason, text):
        return ErrorClass.REFUSAL
    if _ref_context_window(status, code, text):
        return ErrorClass.CONTEXT_WINDOW
    if status == 402:
        return ErrorClass.RATE_LIMITED_NON_RETRYABLE
    if status == 429 or etype in RATE_LIMIT_TYPES or code in ("rate_limit_exceeded", "resource_exhausted"):
        if code in BUSINESS_ERROR_CODES or etype in ("insufficient_quota", "billing_error"):
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        if text.startswith("request too large"):
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        timed = any("perminute" in q.lower() or "perday" in q.lower() for q in facts.quota_ids)
        if _ref_has_retry_hint(facts) or timed:
            return ErrorClass.RATE_LIMITED
        if _has(text, BUSINESS_RATE_LIMIT_HINTS) or "quota" in text:
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        return ErrorClass.RATE_LIMITED
    if code in BUSINESS_ERROR_CODES or etype == "billing_error":
        return ErrorClass.RATE_LIMITED_NON_RETRYABLE
    if status is not None:
        if status >= 500 or status in (408, 409):
            return ErrorClass.RETRYABLE
        if 400 <= status < 500:
            retryable = _has(text, TOOL_SCHEMA_HINTS) or etype in RETRYABLE_4XX_TYPES
            return ErrorClass.RETRYABLE if retryable else ErrorClass.NON_RETRYABLE
        return ErrorClass.RETRYABLE
    if etype in RETRYABLE_TYPES or code in RETRYABLE_TYPES:
        return ErrorClass.RETRYABLE
    if etype in NON_RETRYABLE_TYPES or code in NON_RETRYABLE_TYPES or code == "model_not_found":
        return ErrorClass.NON_RETRYABLE
    return classify_text(facts.message)


def _ref_key_rejected(facts: ErrorFacts) -> bool:
    status = facts.status
    if status == 401:
        return True
    if status == 403:
        return not _has(_low(facts.message), MODERATION_HINTS)
    code, etype, reason = _low(facts.error_code), _low(facts.error_type), _low(facts.reason)
    return reason in KEY_INVALID_REASONS or etype in KEY_INVALID_TYPES or code in KEY_INVALID_TYPES


def _ref_finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def _ref_retry_after(facts: ErrorFacts, now: float) -> float | None:
    """``retry_after_seconds`` with every header value checked by ``_finite``; after the two headers it is unchanged."""
    h = facts.headers
    raw = h.get("retry-after-ms")
    if raw is not None:
        try:
            v = _ref_finite(float(raw) / 1000.0)
            if v is not None:
                return v
        except ValueError:
            pass
    raw = h.get("retry-after")
    if raw is not None:
        try:
            v = _ref_finite(float(raw))
            if v is not None:
                return v
        except ValueError:
            try:
                return max(0.0, email.utils.parsedate_to_datetime(raw).timestamp() - now)
            except (TypeError, ValueError, IndexError):
                pass
    rest = {k: v for k, v in h.items() if k not in ("retry-after", "retry-after-ms")}
    return retry_after_seconds(replace(facts, headers=rest), now=lambda: now)


def _cased(words: tuple[str, ...] | frozenset[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(words)).flatmap(lambda w: st.sampled_from([w, w.upper(), w.title()]))


_word = st.one_of(
    st.none(),
    st.sampled_from(["context_length_exceeded", "content_filter", "rate_limit_exceeded", "invalid_api_key"]),
    _cased(REFUSAL_CODES | RATE_LIMIT_TYPES | BUSINESS_ERROR_CODES | KEY_INVALID_TYPES | KEY_INVALID_REASONS),
    _cased(RETRYABLE_TYPES | NON_RETRYABLE_TYPES | RETRYABLE_4XX_TYPES),
    st.sampled_from(["context_length_exceeded", "model_not_found", "billing_error", "insufficient_quota", "", "x"]),
)
_phrase = st.one_of(
    st.sampled_from(["content filtering policy", "Prompt is too long", "flagged", "Too many tokens"]),
    _cased(REFUSAL_HINTS + CONTEXT_WINDOW_HINTS + BUSINESS_RATE_LIMIT_HINTS + TOOL_SCHEMA_HINTS + MODERATION_HINTS),
    st.sampled_from(["Request too large for model", "quota", "rate limit", "invalid api key", "model not found"]),
    st.text(max_size=12),
)
_message = st.lists(_phrase, max_size=3).map(" ".join)
_header_value = st.sampled_from(
    ["0", "2", "2.5", "-1", "nan", "inf", "-inf", "1e400", "soon", "", " 3 ", "Wed, 21 Oct 2015 07:28:00 GMT"]
)
_headers = st.dictionaries(
    st.sampled_from(["retry-after", "retry-after-ms", "x-request-id", "x-ratelimit-reset-tokens"]), _header_value
)
_facts = st.builds(
    ErrorFacts,
    status=st.one_of(
        st.none(),
        st.sampled_from([400, 401, 403, 429]),
        st.sampled_from([200, 400, 401, 402, 403, 404, 408, 409, 413, 422, 429, 500, 503, 529]),
        st.integers(min_value=100, max_value=599),
    ),
    error_type=_word,
    error_code=_word,
    message=_message,
    headers=_headers,
    retry_delay=st.one_of(st.none(), st.sampled_from(["", "37s", "0.5s", "bad", "1e400s"])),
    quota_ids=st.lists(st.sampled_from(["GenerateRequestsPerMinute", "PerDayPerProject", "Tokens"]), max_size=2).map(
        tuple
    ),
    reason=_word,
    in_band=st.booleans(),
)


@settings(max_examples=800, deadline=None)
@given(facts=_facts)
@example(facts=ErrorFacts(status=400, error_code="context_length_exceeded", message="content filtering policy"))
@example(facts=ErrorFacts(error_code="context_length_exceeded", message="blocked by a content filter"))
@example(facts=ErrorFacts(status=429, error_code="context_length_exceeded", message="prompt is too long"))
@example(facts=ErrorFacts(status=429, message="prompt is too long content filtering policy"))
@example(facts=ErrorFacts(status=413, message="prompt is too long"))
@example(facts=ErrorFacts(status=503, message="prompt is too long"))
def test_classify_is_the_rules_asked_one_by_one(facts: ErrorFacts) -> None:
    """The written-out checks classify every failure as the rules asked as separate functions do."""
    assert classify(facts) is _ref_classify(facts)


@settings(max_examples=400, deadline=None)
@given(facts=_facts)
@example(facts=ErrorFacts(status=403, message="Your input was flagged by moderation"))
@example(facts=ErrorFacts(status=403, message="forbidden", error_code="invalid_api_key"))
@example(facts=ErrorFacts(status=429, error_type="authentication_error"))
@example(facts=ErrorFacts(status=401, message="flagged"))
def test_provider_error_classifies_and_judges_the_key_as_the_rules_do(facts: ErrorFacts) -> None:
    """The error ``provider_error`` makes has the rules' class and key verdict, asked of the facts or of the error."""
    error = provider_error(facts, provider="p.a", model="m")
    assert error.error_class is _ref_classify(facts)
    assert error.auth_failure is _ref_key_rejected(facts)
    assert is_dead_key_error(error) is _ref_key_rejected(facts)
    assert is_dead_key_error(facts) is _ref_key_rejected(facts)


@settings(max_examples=400, deadline=None)
@given(facts=_facts)
def test_header_hints_are_checked_as_finite_does(facts: ErrorFacts) -> None:
    """A header's hint is taken exactly when ``_finite`` would take it, whatever number or text it holds."""
    assert retry_after_seconds(facts, now=lambda: 1.0e9) == _ref_retry_after(facts, 1.0e9)


_shape = st.sampled_from(
    ["sk-abcdefghij", "SK-ABCDEFGHIJ", "xoxb-123456789", "ghp_abcdefghij", "github_pat_abcdefgh", "AIzaabcdefghijkl"]
)
_piece = st.one_of(
    _shape,
    st.sampled_from(["Bearer abcdefghij", "bearer ", "the-secret", "İ", "Σ", "ΣA", "g", "h", "[", "]", " "]),
    st.text(max_size=8),
)


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(_piece, max_size=6),
    secrets=st.lists(st.sampled_from(["the-secret", "sk-abcdefghij", "gh", "abc", "İΣ", "x"]), max_size=3),
    cut=st.integers(min_value=0, max_value=80),
)
def test_scrub_with_the_lowercased_text_is_scrub(pieces: list[str], secrets: list[str], cut: int) -> None:
    """Scrubbing a cut of a text with the whole text lowercased beside it redacts exactly what scrubbing alone does."""
    text = "".join(pieces)
    assert scrub(text[:cut], tuple(secrets), text.lower()) == scrub(text[:cut], tuple(secrets))
    assert scrub(text, secrets, text.lower()) == scrub(text, secrets)
