"""Rate-limit headroom: what a provider's answer headers say is left before its next rate limit.

OpenAI and the vendors that copy it (Groq, Together, OpenRouter's pass-through, Azure) send
``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests`` and the same for tokens, the
reset as a Go duration (``"6m0s"``, ``"20ms"``). Anthropic sends ``anthropic-ratelimit-requests-limit`` /
``-remaining`` / ``-reset`` and the same for ``tokens`` (and ``input-tokens`` / ``output-tokens``), the reset
as an RFC 3339 time. :func:`read_headroom` reads either into one :class:`Headroom`; the walk uses it to cool a
key down *before* it earns a 429 and to prefer keys with headroom (SPEC 6.7).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from turnout.classify import parse_duration


@dataclass(frozen=True, slots=True, kw_only=True)
class Headroom:
    """What one answer said is left (None: not said).

    Attributes:
        requests: Requests left in the current window.
        tokens: Tokens left in the current window (the smallest of the token budgets given).
        requests_reset_at: When the request budget refills (Unix seconds).
        tokens_reset_at: When the token budget refills (Unix seconds).
        request_limit: The request budget per window.
        token_limit: The token budget per window.
        seen_at: When the answer arrived (Unix seconds).
    """

    requests: int | None = None
    tokens: int | None = None
    requests_reset_at: float | None = None
    tokens_reset_at: float | None = None
    request_limit: int | None = None
    token_limit: int | None = None
    seen_at: float = 0.0

    @property
    def exhausted_until(self) -> float | None:
        """When a budget that is used up refills (None: nothing is used up, or its reset is unknown)."""
        ends = [
            reset
            for left, reset in ((self.requests, self.requests_reset_at), (self.tokens, self.tokens_reset_at))
            if left is not None and left <= 0 and reset is not None
        ]
        return max(ends) if ends else None

    @property
    def share_left(self) -> float | None:
        """The smallest fraction of a budget that is left (0 to 1; None when no limit is known)."""
        shares = [
            left / limit
            for left, limit in ((self.requests, self.request_limit), (self.tokens, self.token_limit))
            if left is not None and limit
        ]
        return max(0.0, min(shares)) if shares else None

    def describe(self, now: float) -> dict[str, float | int | None]:
        """A JSON-ready summary for ``/status`` (resets as seconds from ``now``)."""
        return {
            "requests": self.requests,
            "request_limit": self.request_limit,
            "requests_reset_in": _left(self.requests_reset_at, now),
            "tokens": self.tokens,
            "token_limit": self.token_limit,
            "tokens_reset_in": _left(self.tokens_reset_at, now),
            "age": round(max(0.0, now - self.seen_at), 3),
        }


def _left(at: float | None, now: float) -> float | None:
    return None if at is None else round(max(0.0, at - now), 3)


_ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")


def read_headroom(headers: Mapping[str, str], now: float) -> Headroom | None:
    """The headroom ``headers`` announce (None when they announce none). Names are matched case-insensitively.

    Malformed values are ignored, one by one: a provider's odd header never fails a call.
    """
    get = headers.get
    if get("x-ratelimit-remaining-requests") is not None or get("x-ratelimit-remaining-tokens") is not None:
        return Headroom(
            requests=_count(get("x-ratelimit-remaining-requests")),
            tokens=_count(get("x-ratelimit-remaining-tokens")),
            requests_reset_at=_after(get("x-ratelimit-reset-requests"), now),
            tokens_reset_at=_after(get("x-ratelimit-reset-tokens"), now),
            request_limit=_count(get("x-ratelimit-limit-requests")),
            token_limit=_count(get("x-ratelimit-limit-tokens")),
            seen_at=now,
        )
    if any(get(f"anthropic-ratelimit-{kind}-remaining") is not None for kind in _ANTHROPIC_KINDS):
        token_budgets = [
            (_count(get(f"anthropic-ratelimit-{kind}-remaining")), _count(get(f"anthropic-ratelimit-{kind}-limit")))
            for kind in _ANTHROPIC_KINDS[1:]
        ]
        known = [(left, limit) for left, limit in token_budgets if left is not None]
        tokens, token_limit = min(known, key=lambda b: b[0]) if known else (None, None)
        return Headroom(
            requests=_count(get("anthropic-ratelimit-requests-remaining")),
            tokens=tokens,
            requests_reset_at=_instant(get("anthropic-ratelimit-requests-reset")),
            tokens_reset_at=_instant(get("anthropic-ratelimit-tokens-reset")),
            request_limit=_count(get("anthropic-ratelimit-requests-limit")),
            token_limit=token_limit,
            seen_at=now,
        )
    return None


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value.strip())
    except ValueError:
        return None
    return n if n >= 0 else None


def _after(value: str | None, now: float) -> float | None:
    """A reset given as a duration from now (``"6m0s"``, ``"1s"``, or plain seconds)."""
    if value is None:
        return None
    seconds = parse_duration(value)
    if seconds is None:
        try:
            seconds = float(value)
        except ValueError:
            return None
    return now + seconds if math.isfinite(seconds) and seconds >= 0 else None


def _instant(value: str | None) -> float | None:
    """A reset given as an RFC 3339 time (``"2026-12-01T10:00:30Z"``)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None
