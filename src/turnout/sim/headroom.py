"""Scripted rate-limit headroom: per-model request and token budgets that count down and refill.

A model's script may give it budgets::

    [models."gpt-4.1"]
    steps = ["ok"]
    headroom = { requests = 3, tokens = 5000, window = 20, style = "auto", enforce = true }

Each answer then announces what is left, the way the real providers do: OpenAI style
(``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests`` as a Go duration, the same
for tokens; also Azure and the OpenAI-compatible vendors) or Anthropic style
(``anthropic-ratelimit-requests-limit`` / ``-remaining`` / ``-reset`` as an RFC 3339 time, the same for
``tokens``). ``style = "auto"`` picks Anthropic's for the Anthropic route and OpenAI's for the others.

A window opens with the first request after start, reset or a refill, and lasts ``window`` seconds (the
simulator's clock). Every answer spends one request, and its tokens (input + output) from the token budget.
With ``enforce`` (the default) a request that arrives when a budget is used up is answered 429
``rate_limit`` with ``Retry-After`` until the refill instead of its step, as a provider would; a client that
reads the headers never gets there. Budgets are counted like attempts: per model, or per model and key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Style = Literal["auto", "openai", "anthropic"]


class HeadroomSpec(BaseModel):
    """A model's ``headroom`` table in a script."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    window: float = Field(default=60.0, gt=0)
    style: Style = "auto"
    enforce: bool = True

    @model_validator(mode="after")
    def _some_budget(self) -> HeadroomSpec:
        if self.requests is None and self.tokens is None:
            raise ValueError("headroom needs `requests`, `tokens` or both")
        return self

    def limits(self) -> Limits:
        """The runtime form."""
        return Limits(
            requests=self.requests, tokens=self.tokens, window=self.window, style=self.style, enforce=self.enforce
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """A model's budgets per window (see the module docstring)."""

    requests: int | None
    tokens: int | None
    window: float
    style: Style = "auto"
    enforce: bool = True


class _Window:
    """What one counter spent in its current window."""

    __slots__ = ("ends", "requests", "tokens")

    def __init__(self, ends: float) -> None:
        self.ends = ends
        self.requests = 0
        self.tokens = 0


class RateWindows:
    """The current window of every counter (a model, or a model and key) whose model has budgets.

    Args:
        clock: The simulator's clock (monotonic seconds): windows open and close on it.
        wall: Wall-clock seconds, for Anthropic's absolute reset times.
    """

    def __init__(self, clock: Callable[[], float], wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self._windows: dict[object, _Window] = {}

    def clear(self) -> None:
        """Refill every budget (start, reset, a new script)."""
        self._windows.clear()

    def _current(self, counter: object, limits: Limits, now: float) -> _Window:
        window = self._windows.get(counter)
        if window is None or now >= window.ends:
            window = self._windows[counter] = _Window(now + limits.window)
        return window

    def refused(self, counter: object, limits: Limits) -> float | None:
        """Seconds until the refill when ``limits`` are enforced and a budget is used up; else None."""
        if not limits.enforce:
            return None
        now = self._clock()
        window = self._current(counter, limits, now)
        used_up = (limits.requests is not None and window.requests >= limits.requests) or (
            limits.tokens is not None and window.tokens >= limits.tokens
        )
        return window.ends - now if used_up else None

    def spend(self, counter: object, limits: Limits, tokens: int) -> None:
        """Count one answered request and its tokens."""
        window = self._current(counter, limits, self._clock())
        window.requests += 1
        window.tokens += tokens

    def headers(self, counter: object, limits: Limits, protocol: str) -> dict[str, str]:
        """The headers announcing what is left of ``counter``'s budgets, in the protocol's style."""
        now = self._clock()
        window = self._current(counter, limits, now)
        wait = max(window.ends - now, 0.0)
        style = limits.style
        if style == "auto":
            style = "anthropic" if protocol == "anthropic" else "openai"
        out: dict[str, str] = {}
        for name, limit, used in (
            ("requests", limits.requests, window.requests),
            ("tokens", limits.tokens, window.tokens),
        ):
            if limit is None:
                continue
            left = str(max(limit - used, 0))
            if style == "openai":
                out[f"x-ratelimit-limit-{name}"] = str(limit)
                out[f"x-ratelimit-remaining-{name}"] = left
                out[f"x-ratelimit-reset-{name}"] = go_duration(wait)
            else:
                out[f"anthropic-ratelimit-{name}-limit"] = str(limit)
                out[f"anthropic-ratelimit-{name}-remaining"] = left
                out[f"anthropic-ratelimit-{name}-reset"] = rfc3339(self._wall() + wait)
        return out


def go_duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes a reset (``"120ms"``, ``"8.5s"``, ``"6m0s"``), rounded up to the millisecond."""
    ms = math.ceil(max(seconds, 0.0) * 1000)
    if ms < 1000:
        return f"{ms}ms"
    minutes, ms = divmod(ms, 60_000)
    hours, minutes = divmod(minutes, 60)
    secs = f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs


def rfc3339(at: float) -> str:
    """A wall-clock time as Anthropic writes a reset (``"2026-01-01T10:00:30Z"``), rounded up to the second."""
    return datetime.fromtimestamp(math.ceil(at), tz=UTC).isoformat().replace("+00:00", "Z")
