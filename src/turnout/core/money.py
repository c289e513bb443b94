"""How an amount of money is written: in USD, never rounded to a zero that was not one."""

from __future__ import annotations

import math


def usd(value: float | None, unknown: str = "-") -> str:
    """A cost in USD with six decimals, more for a cost below a millionth, so that no cost reads as zero."""
    if value is None or not math.isfinite(value):
        return unknown
    if value == 0 or abs(value) >= 1e-6:
        return f"${value:.6f}"
    return f"${value:.{1 - math.floor(math.log10(abs(value)))}f}"  # two significant digits
