"""Reading a running gateway's ``GET /status`` from outside it (``turnout status --gateway URL``).

The gateway keeps per-process state a shared store does not hold (the rate-limit headroom its upstreams last
announced; every cooldown with the memory store), so asking the gateway is the way to see it. The answer comes
from a server, so what is printed from it is bounded and stripped of control characters.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

#: The longest ``/status`` body read, and how long the whole exchange may take.
MAX_STATUS_BYTES = 4 * 1024 * 1024
TIMEOUT_S = 10.0


class GatewayUnreadable(Exception):
    """The gateway's ``/status`` could not be read (unreachable, refused, or not a status body)."""


async def read_status(url: str, key: str | None) -> dict[str, Any]:
    """The ``/status`` body of the gateway at ``url`` (``http://host:port``), sent ``key`` as its client key.

    Raises:
        GatewayUnreadable: The gateway did not answer with a status body; the message says why.
    """
    if not url.startswith(("http://", "https://")):
        raise GatewayUnreadable("the gateway URL must start with http:// or https://")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url.rstrip("/") + "/status", headers=headers) as resp,
        ):
            body = await resp.content.read(MAX_STATUS_BYTES + 1)
            status = resp.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise GatewayUnreadable(f"cannot reach the gateway: {type(exc).__name__}") from exc
    if status == 401:
        raise GatewayUnreadable("the gateway refused the client key (set TURNOUT_GATEWAY_KEY)")
    if status != 200:
        raise GatewayUnreadable(f"the gateway answered HTTP {status}")
    if len(body) > MAX_STATUS_BYTES:
        raise GatewayUnreadable("the status body is too large")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise GatewayUnreadable("the status body is not JSON") from exc
    if not isinstance(data, dict):
        raise GatewayUnreadable("the status body is not a JSON object")
    return data


def rows(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The objects listed under ``name`` in a status body (anything else there is left out)."""
    items = body.get(name)
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def printable(value: object, limit: int = 120) -> str:
    """``value`` as one bounded line of text for a terminal (control characters become ``?``)."""
    text = str(value)[:limit]
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def headroom_line(row: dict[str, Any]) -> str:
    """One row of ``/status`` ``headroom`` for the terminal: profile, key, what is left of each budget."""
    parts = [printable(row.get("profile")), f"key {printable(row.get('key_id') or '-')}"]
    for budget, limit, reset in (
        ("requests", "request_limit", "requests_reset_in"),
        ("tokens", "token_limit", "tokens_reset_in"),
    ):
        left = row.get(budget)
        if left is None:
            continue
        text = f"{budget} {printable(left)}"
        if row.get(limit) is not None:
            text += f"/{printable(row[limit])}"
        if isinstance(row.get(reset), int | float):
            text += f" (refills in {row[reset]:.1f}s)"
        parts.append(text)
    if row.get("low"):
        parts.append("low")
    return "  ".join(parts)


def pool_lines(pool: dict[str, Any]) -> list[str]:
    """One ``/status`` ``pools`` row for the terminal: the pool and its strategy, then one line per member."""
    out = [f"{printable(pool.get('name'))}  {printable(pool.get('strategy'))}"]
    for member in rows(pool, "members"):
        ttft, share = member.get("ttft_ms"), member.get("share")
        out.append(
            f"{printable(member.get('profile'))}  in flight {printable(member.get('in_flight'))}  "
            f"calls {printable(member.get('calls'))}"
            + (f" ({share:.0%})" if isinstance(share, int | float) else "")
            + (f"  ttft {ttft:.0f} ms" if isinstance(ttft, int | float) else "")
        )
    return out


def hedging_line(hedging: dict[str, Any]) -> str | None:
    """``/status`` ``hedging`` for the terminal (None when no profile hedges)."""
    if hedging.get("enabled") is not True:
        return None
    rate = hedging.get("rate")
    budget = hedging.get("budget_left")
    return (
        f"{printable(hedging.get('hedged'))} hedges of {printable(hedging.get('calls'))} calls"
        + (f" ({rate:.1%})" if isinstance(rate, int | float) else "")
        + f"; answered first: the hedge {printable(hedging.get('hedge_wins'))}, "
        f"the first entry {printable(hedging.get('original_wins'))}"
        + (f"; budget left {budget:g}" if isinstance(budget, int | float) else "")
    )


def ledger_line(ledger: dict[str, Any]) -> str:
    """``/status`` ``ledger`` for the terminal: whether it records, and what waits."""
    state = "recording" if ledger.get("ok") is True else f"NOT RECORDING ({printable(ledger.get('problem'))})"
    return (
        f"{state}; {printable(ledger.get('errors'))} failed writes, {printable(ledger.get('pending_calls'))} calls "
        f"waiting; on failure {printable(ledger.get('on_failure'))}"
    )


def key_spend_line(row: dict[str, Any]) -> str:
    """One ``/status`` ``keys`` row for the terminal: a limited key's spend, reservations and limits."""
    limits = [
        f"{unit[0]}{printable(row[field])}{unit[1]}"
        for field, unit in (
            ("daily_limit_usd", ("$", "/day")),
            ("max_call_usd", ("$", "/call")),
            ("rpm", ("", " requests/min")),
            ("tpm", ("", " tokens/min")),
        )
        if row.get(field) is not None
    ]
    return (
        f"{printable(row.get('key'))}  spent ${printable(row.get('spent_usd'))}  reserved "
        f"${printable(row.get('reserved_usd'))} ({printable(row.get('in_flight'))} in flight)  limit "
        + (", ".join(limits) or "none")
    )
