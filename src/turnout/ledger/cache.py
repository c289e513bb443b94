"""Prompt caching read back from the ledger: per profile and model, the cached share of input and what it saved.

``turnout ledger`` prints it. The ledger records each attempt's input, cached-input and cache-write tokens; the
saving is priced here, when read, at the profile's rates (:class:`turnout.ledger.pricing.ProfileRates`), per attempt so
that a tiered price applies as it did to the call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnout.core.types import Usage
from turnout.ledger.pricing import Rates


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSummary:
    """Prompt caching of one profile and model: the answered attempts' input and what the cache did with it.

    Attributes:
        provider: The profile, ``family.alias``.
        model: The model sent.
        input_tokens: Input tokens of its answered attempts (cached part included).
        cached_input_tokens: Of those, the part read from the provider's prompt cache.
        cache_write_tokens: Of those, the part written to it.
        saved_usd: What the cached part saved: its tokens at the input price minus at the cached price (None when
            the model's prices are unknown).
    """

    provider: str
    model: str
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    saved_usd: float | None

    @property
    def hit_rate(self) -> float | None:
        """Cached input tokens over input tokens (None without input)."""
        return self.cached_input_tokens / self.input_tokens if self.input_tokens else None


def cache_summary(
    path: str | Path, rates: Callable[[str, str], Rates | None], *, since: float | None = None
) -> list[CacheSummary]:
    """Prompt caching per profile and model of the answered attempts since ``since`` (Unix seconds).

    Args:
        path: The ledger file (a missing one has no attempts).
        rates: A profile's rates for a model (:meth:`turnout.ledger.pricing.ProfileRates.rates`), to price the saving.
        since: The cut-off (None: every attempt).
    """
    p = Path(path)
    if not p.exists():
        return []
    db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT provider, model, COALESCE(input_tokens, 0), COALESCE(cached_input_tokens, 0), "
            "COALESCE(SUM(cache_write_tokens), 0), COUNT(*) FROM attempts WHERE ts >= ? AND outcome = 'ok' "
            "GROUP BY provider, model, 3, 4 ORDER BY provider, model",
            (since if since is not None else 0.0,),
        ).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return []
    finally:
        db.close()
    # grouped by each attempt's own input and cached counts: a tiered price applies per attempt
    totals: dict[tuple[str, str], list[Any]] = {}
    for provider, model, tin, cached, written, n in rows:
        t = totals.setdefault((provider, model), [0, 0, 0, 0.0, rates(provider, model)])
        t[0] += tin * n
        t[1] += cached * n
        t[2] += written
        if t[4] is not None and cached:
            t[3] += t[4].cache_saving(Usage(input_tokens=tin, cached_input_tokens=cached)) * n
    return [
        CacheSummary(
            provider=provider,
            model=model,
            input_tokens=tin,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            saved_usd=saved if priced is not None else None,
        )
        for (provider, model), (tin, cached, written, saved, priced) in totals.items()
    ]
