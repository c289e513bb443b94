"""Hedged requests: when the first entry is slow to answer, the same request goes to the next one too.

After ``after_ms`` without a response (a stream: without a first visible event), the walk opens the same
request on the next eligible entry, or on another key of the same entry where the profile says so, and keeps
whichever answers first; the other is cancelled and recorded as ``hedge_lost``. Nothing reaches the caller
before one side is chosen, so hedging never replays output.

``after_ms = "auto"`` waits for twice the entry's recent median time to first token, or longer where its ordinary
answers vary more: the median plus three median absolute deviations (for normally varying answers, about their
98th percentile). So ordinary calls a little slower than the median are never hedged; and since slow answers,
however slow, barely move the median and its deviation while they are fewer than half, the tail is always
hedged (a 95th percentile would land inside any tail of more than 5 % of the answers, and stop hedging it). A token
bucket caps the extra requests: each call that could hedge adds ``budget`` tokens (at most ``burst``), each hedge
takes one, so in the long run at most ``budget`` of the calls hedge.

A call whose conversation is pinned to the member it starts on (:mod:`turnout.walk.affinity`: its prompt is cached
there) is not hedged within that member's normal latency (:func:`normal_latency`), whatever ``after_ms`` says: a
hedge that won would move the conversation off its cache for an answer the member gives in its ordinary time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from turnout.walk.stats import EntryStats


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
    burst: float = 5.0
    other_keys: bool = False

    def delay(self, stats: EntryStats | None, *, pinned: bool = False) -> float | None:
        """Seconds to wait before hedging a call to an entry with ``stats`` (None: do not hedge it).

        Args:
            stats: The entry's recent times to first token (None: not kept).
            pinned: The call's conversation is pinned to the entry's member (its prompt is cached there): the hedge
                waits at least the entry's :func:`normal_latency`, so a conversation is raced on another member (and
                may move there) only when its own member is far slower than its ordinary answers.
        """
        if not self.enabled:
            return None
        if self.after_ms != "auto":
            fixed = self.after_ms / 1000.0
            normal = normal_latency(stats) if pinned and stats is not None else None
            return fixed if normal is None else max(fixed, normal)
        if stats is None:
            return None
        spread = stats.spread()
        if spread is None:
            return None  # too few answers seen to know what is ordinary
        median, deviation = spread
        return max(2.0 * median, median + 3.0 * deviation)  # never below :func:`normal_latency`


def normal_latency(stats: EntryStats) -> float | None:
    """The longest ordinary time to first token of an entry: its recent median plus three median absolute deviations.

    For normally varying answers, about their 98th percentile; a tail of slow answers, however slow, barely moves it
    while they are fewer than half. None while too few answers were seen (fewer than
    :data:`~turnout.walk.stats.MIN_SAMPLES`).
    """
    spread = stats.spread()
    if spread is None:
        return None
    median, deviation = spread
    return median + 3.0 * deviation


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
        #: Calls that could have hedged, hedges sent, hedges that answered first, and hedged calls whose first
        #: entry still answered first (the rest of the hedges: both sides failed, or the race is still on).
        self.calls = 0
        self.hedged = 0
        self.won = 0
        self.kept = 0

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

    def tally(self) -> HedgeTally:
        """The counts so far and the budget left (what ``/status`` and ``/metrics`` show)."""
        return HedgeTally(
            calls=self.calls, hedged=self.hedged, hedge_wins=self.won, original_wins=self.kept, budget=self.tokens
        )

    def describe(self) -> dict[str, Any]:
        """``client.status()["hedging"]``: :func:`hedging_status` of this process's :meth:`tally`."""
        return hedging_status(self.tally() if self.enabled else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgeTally:
    """What hedging did in one process (or, summed, in every worker of a gateway).

    Attributes:
        calls: Calls that could have hedged (their first entry had a hedge delay).
        hedged: Hedges sent: the extra upstream requests.
        hedge_wins: Hedged calls the hedge answered first.
        original_wins: Hedged calls the first entry still answered first.
        budget: Hedges the budget allows now (tokens left; summed over workers, each has its own bucket).
    """

    calls: int = 0
    hedged: int = 0
    hedge_wins: int = 0
    original_wins: int = 0
    budget: float = 0.0

    def __add__(self, other: HedgeTally) -> HedgeTally:
        return HedgeTally(
            calls=self.calls + other.calls,
            hedged=self.hedged + other.hedged,
            hedge_wins=self.hedge_wins + other.hedge_wins,
            original_wins=self.original_wins + other.original_wins,
            budget=self.budget + other.budget,
        )

    def describe(self) -> dict[str, float | int]:
        """Calls, hedges, the hedge rate (hedges per call that could hedge), who won, and the budget left."""
        return {
            "calls": self.calls,
            "hedged": self.hedged,
            "rate": round(self.hedged / self.calls, 4) if self.calls else 0.0,
            "hedge_wins": self.hedge_wins,
            "original_wins": self.original_wins,
            "budget_left": round(self.budget, 3),
        }


def hedging_status(tally: HedgeTally | None) -> dict[str, Any]:
    """``{"enabled", **tally.describe()}``: what ``client.status()`` and ``/status`` show (None: hedging is off)."""
    return {"enabled": tally is not None, **(tally if tally is not None else HedgeTally()).describe()}
