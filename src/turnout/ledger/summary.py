"""Reading the ledger: ``turnout ledger``'s summaries, the day so far (the status page), spend per caller.

Every reader opens the file read-only and answers for a missing file (or one without tables yet) with empty
totals; the writer is :class:`turnout.ledger.writer.Ledger`.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnout.core.attribution import SKIPS

# --- summaries (``turnout ledger``) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteSummary:
    """Totals for one profile and model."""

    provider: str
    model: str
    attempts: int
    outcomes: dict[str, int]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    avg_duration_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerSummary:
    """What ``turnout ledger`` prints.

    Attributes:
        calls: Calls since the cut-off.
        failed_calls: Calls that ended without an answer.
        fallbacks: Calls served by a fallback.
        attempts: Attempt records, skips included.
        failure_classes: Failed attempts per outcome, most frequent first (skips are not failures of a provider).
        skips: Entries skipped without a call, per outcome (``cooldown_skip``, ``breaker_skip``).
        cost_usd: Total cost, None when no attempt was priced.
        routes: Totals per profile and model.
        usage_notes: Attempts whose usage is not the provider's own, per note: ``estimated`` (a stream abandoned or
            cut before its usage came, a call abandoned before its answer: Turnout's estimate), ``clamped`` (a
            count out of range, bounded), ``sanitised`` (a value SQLite could not store, replaced) or ``reserved``
            (a call whose process ended before recording it, billed at the worst case it reserved; its outcome
            ``process_died``), with their cost.
    """

    calls: int
    failed_calls: int
    fallbacks: int
    attempts: int
    failure_classes: dict[str, int]
    cost_usd: float | None
    routes: list[RouteSummary]
    skips: dict[str, int]
    usage_notes: dict[str, tuple[int, float | None]] = field(default_factory=dict)


def summarize(path: str | Path, *, since: float | None = None) -> LedgerSummary:
    """Totals per profile and model, failure classes, skips, fallbacks and cost since ``since`` (Unix seconds)."""
    p = Path(path)
    if not p.exists():
        return LedgerSummary(
            calls=0, failed_calls=0, fallbacks=0, attempts=0, failure_classes={}, cost_usd=None, routes=[], skips={}
        )
    db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True)  # as_uri escapes '#', '?' and '%'
    try:
        cutoff = since if since is not None else 0.0
        calls, failed, fallbacks = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(outcome != 'ok'), 0), COALESCE(SUM(fallback), 0) FROM calls WHERE ts >= ?",
            (cutoff,),
        ).fetchone()
        classes = dict(
            db.execute(
                "SELECT outcome, COUNT(*) FROM attempts WHERE ts >= ? AND outcome != 'ok' GROUP BY outcome "
                "ORDER BY COUNT(*) DESC",
                (cutoff,),
            ).fetchall()
        )
        rows = db.execute(
            "SELECT provider, model, outcome, COUNT(*), COALESCE(SUM(input_tokens), 0), "
            "COALESCE(SUM(output_tokens), 0), SUM(cost_usd), AVG(duration_ms) FROM attempts WHERE ts >= ? "
            "GROUP BY provider, model, outcome ORDER BY provider, model",
            (cutoff,),
        ).fetchall()
        notes = _usage_notes(db, cutoff)
    finally:
        db.close()
    summaries = _route_summaries(rows)
    known_costs = [s.cost_usd for s in summaries if s.cost_usd is not None]
    return LedgerSummary(
        calls=calls,
        failed_calls=failed,
        fallbacks=fallbacks,
        attempts=sum(s.attempts for s in summaries),
        failure_classes={k: n for k, n in classes.items() if k not in SKIPS},
        cost_usd=sum(known_costs) if known_costs else None,
        routes=summaries,
        skips={k: n for k, n in classes.items() if k in SKIPS},
        usage_notes=notes,
    )


def _usage_notes(db: sqlite3.Connection, cutoff: float) -> dict[str, tuple[int, float | None]]:
    """Attempts and their cost per usage note since ``cutoff``; empty for a file from before notes were recorded."""
    try:
        notes = db.execute(
            "SELECT usage_note, COUNT(*), SUM(cost_usd) FROM attempts WHERE ts >= ? AND usage_note IS NOT NULL "
            "GROUP BY usage_note ORDER BY usage_note",
            (cutoff,),
        ).fetchall()
    except sqlite3.OperationalError:  # a file from before usage notes were recorded
        return {}
    return {note: (n, cost) for note, n, cost in notes}


def _route_summaries(rows: list[tuple[Any, ...]]) -> list[RouteSummary]:
    """Fold attempt rows grouped by profile, model and outcome into one summary per profile and model.

    The average duration leaves skips out (they made no call); the cost is None when no attempt was priced.
    """
    routes: dict[tuple[str, str], dict[str, Any]] = {}
    for provider, model, outcome, n, tin, tout, cost, avg in rows:
        r = routes.setdefault(
            (provider, model),
            {"attempts": 0, "outcomes": {}, "in": 0, "out": 0, "cost": None, "dur": 0.0, "dur_n": 0},
        )
        r["attempts"] += n
        r["outcomes"][outcome] = n
        r["in"] += tin
        r["out"] += tout
        if cost is not None:
            r["cost"] = (r["cost"] or 0.0) + cost
        if avg is not None and outcome not in SKIPS:
            r["dur"] += avg * n
            r["dur_n"] += n
    return [
        RouteSummary(
            provider=prov,
            model=model,
            attempts=r["attempts"],
            outcomes=r["outcomes"],
            input_tokens=r["in"],
            output_tokens=r["out"],
            cost_usd=r["cost"],
            avg_duration_ms=(r["dur"] / r["dur_n"]) if r["dur_n"] else None,
        )
        for (prov, model), r in routes.items()
    ]


def spend_by_caller(path: str | Path, since: float) -> dict[str, float]:
    """Total cost per caller of the calls since ``since`` (Unix seconds); empty when the file does not exist."""
    p = Path(path)
    if not p.exists():
        return {}
    db = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = db.execute(
            "SELECT caller, SUM(cost_usd) FROM calls WHERE caller IS NOT NULL AND ts >= ? GROUP BY caller", (since,)
        ).fetchall()
    except sqlite3.OperationalError:  # no calls table yet, or a file from before callers were recorded
        return {}
    finally:
        db.close()
    return {caller: cost or 0.0 for caller, cost in rows}


def now() -> float:
    """Wall-clock seconds (the ledger's time base)."""
    return time.time()


# --- the day so far (the gateway's status page) ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileDay:
    """One profile's day.

    Attributes:
        profile: ``family.alias``.
        calls: Calls that asked for it first.
        fallbacks: Of those, the calls another entry served.
        attempts: Attempts on it (skips included), whoever asked.
        cost_usd: The cost of its attempts (None when none was priced).
    """

    profile: str
    calls: int
    fallbacks: int
    attempts: int
    cost_usd: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DaySummary:
    """Calls, fallbacks and cost since a time (the start of the UTC day), per profile and per hour.

    Attributes:
        since: The start of the period (Unix seconds).
        profiles: Per profile, most calls first.
        cost_by_hour: The cost of each hour since ``since`` (24 values; 0 for an hour without priced attempts).
    """

    since: float
    profiles: tuple[ProfileDay, ...]
    cost_by_hour: tuple[float, ...]

    @property
    def calls(self) -> int:
        """Every call of the period."""
        return sum(p.calls for p in self.profiles)

    @property
    def fallbacks(self) -> int:
        """Every call of the period that a fallback served."""
        return sum(p.fallbacks for p in self.profiles)

    @property
    def cost_usd(self) -> float | None:
        """The period's cost (None when no attempt was priced)."""
        costs = [p.cost_usd for p in self.profiles if p.cost_usd is not None]
        return sum(costs) if costs else None


#: The most profiles a day summary lists (the configuration names them; a bound all the same).
MAX_DAY_PROFILES = 200


def day_summary(path: str | Path, since: float, *, timeout: float = 5.0) -> DaySummary:
    """Calls, fallbacks and cost per profile, and cost per hour, since ``since`` (blocking: run it in a thread).

    Reads the file read-only; a missing file (or one without tables yet) is an empty day.

    Args:
        path: The ledger file.
        since: The start of the period (Unix seconds), e.g. 00:00 UTC today.
        timeout: How long to wait for a writer's lock.
    """
    empty = DaySummary(since=since, profiles=(), cost_by_hour=(0.0,) * 24)
    p = Path(path)
    if not p.exists():
        return empty
    db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True, timeout=timeout)
    try:
        calls = db.execute(
            "SELECT COALESCE(requested_provider, '-'), COUNT(*), COALESCE(SUM(fallback), 0) FROM calls "
            "WHERE ts >= ? GROUP BY 1 ORDER BY 2 DESC LIMIT ?",
            (since, MAX_DAY_PROFILES),
        ).fetchall()
        attempts = db.execute(
            "SELECT provider, COUNT(*), SUM(cost_usd) FROM attempts WHERE ts >= ? GROUP BY provider LIMIT ?",
            (since, MAX_DAY_PROFILES),
        ).fetchall()
        hours = db.execute(
            "SELECT CAST((ts - ?) / 3600 AS INTEGER), SUM(cost_usd) FROM attempts WHERE ts >= ? GROUP BY 1",
            (since, since),
        ).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return empty
    finally:
        db.close()
    spent = {provider: (n, cost) for provider, n, cost in attempts}
    rows = [
        ProfileDay(
            profile=profile,
            calls=n,
            fallbacks=fallbacks,
            attempts=spent.get(profile, (0, None))[0],
            cost_usd=spent.get(profile, (0, None))[1],
        )
        for profile, n, fallbacks in calls
    ]
    asked = {r.profile for r in rows}
    rows += [  # profiles that only served others' calls
        ProfileDay(profile=provider, calls=0, fallbacks=0, attempts=n, cost_usd=cost)
        for provider, (n, cost) in sorted(spent.items())
        if provider not in asked
    ][: max(0, MAX_DAY_PROFILES - len(rows))]
    by_hour = [0.0] * 24
    for hour, cost in hours:
        if cost is not None and 0 <= hour < 24:
            by_hour[hour] += cost
    return DaySummary(since=since, profiles=tuple(rows), cost_by_hour=tuple(by_hour))
