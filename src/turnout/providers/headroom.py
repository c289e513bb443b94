"""Rate-limit headroom: what a provider's answer headers say is left before its next rate limit.

OpenAI and the vendors that copy it (Groq, Together, OpenRouter's pass-through, Azure) send
``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests`` and the same for tokens, the
reset as a Go duration (``"6m0s"``, ``"20ms"``). Anthropic sends ``anthropic-ratelimit-requests-limit`` /
``-remaining`` / ``-reset`` and the same for ``tokens`` (and ``input-tokens`` / ``output-tokens``), the reset
as an RFC 3339 time. :func:`read_headroom` reads either into one :class:`Headroom`.

What the answers say is kept per profile and key in this process (:class:`HeadroomBook`, one per profile): the
key pool (:mod:`turnout.walk.keys`) uses it to cool a key down *before* it earns a 429 and to prefer keys with
headroom, and ``/status`` shows it. An adapter reads its answers through a :class:`HeadroomWatch`,
which the factory attaches; an answer that announces no headroom costs the watch four header lookups.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from turnout.core.classify import parse_duration


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


#: A budget with less than this share left makes its key one to avoid while another key has more.
LOW_SHARE = 0.1

#: The names whose presence says an answer announces its headroom (OpenAI style, Anthropic style): looked up
#: first, so an answer that announces nothing costs two lookups in its (hashed, case-insensitive) header map.
PROBES = ("x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
_OPENAI_PROBE, _ANTHROPIC_PROBE = PROBES

#: ``(remaining, limit)`` header names of every budget, per style.
_OPENAI_BUDGETS = tuple((f"x-ratelimit-remaining-{k}", f"x-ratelimit-limit-{k}") for k in ("requests", "tokens"))
_ANTHROPIC_BUDGETS = tuple(
    (f"anthropic-ratelimit-{k}-remaining", f"anthropic-ratelimit-{k}-limit") for k in _ANTHROPIC_KINDS
)


def _short(left: int | None, limit: int | None) -> bool:
    """A budget is short when nothing is left, or less than :data:`LOW_SHARE` of its limit."""
    return left is not None and (left <= 0 or (limit is not None and limit > 0 and left < LOW_SHARE * limit))


def is_tight(headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` announce a budget that is short (see :func:`_short`), reading only the counts.

    The cheap test run on every answer that announces headroom (written out, without calls: it runs on every
    call to OpenAI or Anthropic); the resets are parsed only when it says yes, or when the headroom is shown.
    """
    get = headers.get
    for left_name, limit_name in _OPENAI_BUDGETS if _OPENAI_PROBE in headers else _ANTHROPIC_BUDGETS:
        left = get(left_name)
        if left is None:
            continue
        limit = get(limit_name)
        if limit and len(left) >= len(limit) and left[0] != "0":
            continue  # as many digits as the limit and no leading zero: at least a tenth is left (or malformed)
        try:
            n = int(left)
        except ValueError:
            continue
        if n <= 0:
            return True
        if limit is not None:
            try:
                if n < LOW_SHARE * int(limit):
                    return True
            except ValueError:
                continue
    return False


def _low_until(room: Headroom, horizon: float) -> float | None:
    """Until when ``room`` marks its key as short of headroom (None: it does not).

    The mark lasts until the short budgets refill, and never past ``horizon`` (an old reading says little
    about now).
    """
    ends = [
        horizon if reset is None else min(reset, horizon)
        for left, limit, reset in (
            (room.requests, room.request_limit, room.requests_reset_at),
            (room.tokens, room.token_limit, room.tokens_reset_at),
        )
        if _short(left, limit)
    ]
    return max(ends) if ends else None


class HeadroomBook:
    """The last headroom each key of one profile announced, in this process.

    Kept in memory, not in the shared store: a reading changes with every answer, and writing it on every
    call would put I/O on the hot path. What must be shared, a key with nothing left, becomes a cooldown in
    the state store (:meth:`turnout.walk.keys.KeyPool.observe`), which every process sees. A reading is kept as
    the answer's headers and parsed only when it is short or shown.

    Args:
        profile: The profile, ``family.alias``.
        max_cooldown: The longest cooldown a reading may ask for (the walk's cap on cooldowns), and the
            longest a reading marks a key as short of headroom.
    """

    __slots__ = ("_heard", "low", "max_cooldown", "profile")

    def __init__(self, profile: str, *, max_cooldown: float) -> None:
        self.profile = profile
        self.max_cooldown = max_cooldown
        self._heard: dict[str | None, tuple[Mapping[str, str], float]] = {}
        #: Key id → until when it is short of headroom. Read on every pick of a rotating pool: empty (the
        #: common case, also when nothing is known) costs one truth test.
        self.low: dict[str | None, float] = {}

    def hear(self, key_id: str | None, headers: Mapping[str, str], now: float) -> Headroom | None:
        """Keep what an answer on ``key_id`` announced at ``now``; the parsed headroom when a budget is short.

        ``key_id`` None stands for a keyless profile. A short budget marks the key as short of headroom
        until that budget refills (at most ``max_cooldown``); an answer with room to spare clears the mark.
        """
        self._heard[key_id] = (headers, now)
        if not is_tight(headers):
            if self.low:
                self.low.pop(key_id, None)
            return None
        room = read_headroom(headers, now)
        until = None if room is None else _low_until(room, now + self.max_cooldown)
        if until is not None and until > now:
            self.low[key_id] = until
        else:
            self.low.pop(key_id, None)
        return room

    def is_low(self, key_id: str | None, now: float) -> bool:
        """Whether ``key_id``'s last reading says it is short of headroom at ``now``."""
        until = self.low.get(key_id)
        if until is None:
            return False
        if until <= now:
            del self.low[key_id]
            return False
        return True

    def last(self, key_id: str | None) -> Headroom | None:
        """The last reading of ``key_id``, parsed (None: none yet)."""
        heard = self._heard.get(key_id)
        return None if heard is None else read_headroom(*heard)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """A JSON-ready row per key with a reading: ``profile``, ``key_id``, ``low``, :meth:`Headroom.describe`."""
        rows = []
        for kid in sorted(self._heard, key=lambda k: k or ""):
            room = self.last(kid)
            if room is not None:
                rows.append(
                    {"profile": self.profile, "key_id": kid, "low": self.is_low(kid, now), **room.describe(now)}
                )
        return rows


#: What a watch reports an answer's headers to: the key pool's ``observe`` (an awaitable when the store must be
#: written).
Report = Callable[[str | None, Mapping[str, str]], Awaitable[None] | None]


class HeadroomWatch:
    """Hands the headers of one credential's answers to its key pool, when they announce headroom.

    An adapter holds one (attached by the factory) and calls :meth:`seen` with the headers of every
    successful answer, before its body is parsed or its stream read.

    Args:
        key_id: The credential's id (None for a keyless profile).
        report: Where the headers go (the key pool's ``observe``).
    """

    __slots__ = ("_report", "key_id")

    def __init__(self, key_id: str | None, report: Report) -> None:
        self.key_id = key_id
        self._report = report

    def seen(self, headers: Mapping[str, str]) -> Awaitable[None] | None:
        """Report an answer's headers; an awaitable when a cooldown must be written, else None.

        An answer is read when it names its remaining requests (:data:`PROBES`); one that does not costs two
        lookups.
        """
        if _OPENAI_PROBE in headers or _ANTHROPIC_PROBE in headers:
            return self._report(self.key_id, headers)
        return None
