"""Hedged requests: when the first entry is slow to answer, the same request goes to the next one too.

After ``after_ms`` without a response (a stream: without a first visible event), the walk opens the same
request on the next eligible entry, or on another key of the same entry where the profile says so, and keeps
whichever answers first; the other is cancelled and recorded as ``hedge_lost``. Nothing reaches the caller
before one side is chosen, so hedging never replays output.

``after_ms = "auto"`` waits for the entry's recent 95th percentile time to first token, and at least twice its
median, so ordinary calls a little slower than the median are never hedged: only the tail is. A token bucket
caps the extra requests: each call that could hedge adds ``budget`` tokens (at most ``burst``), each hedge
takes one, so in the long run at most ``budget`` of the calls hedge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from turnout.stats import EntryStats


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgeSettings:
    """When a call hedges (``[reliability.hedge]``, overridable per profile).

    Attributes:
        enabled: Whether calls to the profile hedge (off by default).
        after_ms: Milliseconds without a response before the hedge, or ``"auto"``.
        budget: The share of calls that may hedge, in the long run.
        burst: The most hedges that may happen in a row after a quiet spell.
        other_keys: Hedge on another key of the same entry when no other entry is eligible.
    """

    enabled: bool = False
    after_ms: float | Literal["auto"] = "auto"
    budget: float = 0.05
    burst: float = 2.0
    other_keys: bool = False

    def delay(self, stats: EntryStats | None) -> float | None:
        """Seconds to wait before hedging a call to an entry with ``stats`` (None: do not hedge it)."""
        if not self.enabled:
            return None
        if self.after_ms != "auto":
            return self.after_ms / 1000.0
        if stats is None:
            return None
        p95, p50 = stats.percentile(0.95), stats.percentile(0.5)
        if p95 is None or p50 is None:
            return None  # too few answers seen to know what the tail is
        return max(p95, 2.0 * p50)


class Hedging:
    """The client's hedging: the settings of each profile, the budget, and what happened.

    Args:
        default: The settings of ``[reliability.hedge]``.
        profiles: Per-profile settings, where a profile overrides them.
    """

    def __init__(self, default: HedgeSettings, profiles: dict[str, HedgeSettings] | None = None) -> None:
        self.default = default
        self.profiles = dict(profiles or {})
        self.tokens = max(1.0, default.burst)
        #: Calls that could have hedged, hedges made, and hedges that won.
        self.calls = 0
        self.hedged = 0
        self.won = 0

    @property
    def enabled(self) -> bool:
        """Whether any profile hedges."""
        return self.default.enabled or any(s.enabled for s in self.profiles.values())

    def settings(self, profile: str) -> HedgeSettings:
        """The settings of ``profile``."""
        return self.profiles.get(profile, self.default)

    def credit(self, settings: HedgeSettings) -> None:
        """One call that could hedge: the budget grows by its share."""
        self.calls += 1
        self.tokens = min(self.tokens + settings.budget, max(1.0, settings.burst))

    def take(self) -> bool:
        """Spend one hedge from the budget (False: the budget is spent)."""
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        self.hedged += 1
        return True

    def describe(self) -> dict[str, float | int]:
        """What ``/status`` shows: calls, hedges, wins, the hedge rate and the budget left."""
        return {
            "calls": self.calls,
            "hedged": self.hedged,
            "won": self.won,
            "rate": round(self.hedged / self.calls, 4) if self.calls else 0.0,
            "budget_left": round(self.tokens, 3),
        }
