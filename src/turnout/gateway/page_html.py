"""The status page and its login form as HTML: server-rendered, inline CSS, inline SVG charts, no script.

Every string that came from a client or an upstream (a model a client chose, a profile or key name read back
from another worker) goes through :func:`esc`: bounded, control characters replaced, HTML-escaped. The page
refreshes itself with a meta refresh and fits a phone (a viewport meta, wrapping cards, tables that scroll
sideways inside their card).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from turnout.core.attribution import SKIPS, Attempt
from turnout.gateway.page_data import EntryView, KeyView, PageData, RouteView
from turnout.ledger.writer import DaySummary

#: Seconds between two refreshes of the page.
REFRESH_S = 5
#: The longest text of one value on the page.
MAX_TEXT = 120

_CSS = """
:root{color-scheme:light dark;--bg:#f6f7f9;--card:#fff;--ink:#1b1f24;--dim:#5f6b7a;--line:#d9dee5;
--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--skip:#8c959f;--bar:#0969da}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--card:#161b22;--ink:#e6edf3;--dim:#8d96a0;--line:#30363d;
--ok:#3fb950;--warn:#d29922;--bad:#f85149;--skip:#6e7681;--bar:#2f81f7}}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--ink)}
header{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;justify-content:space-between;
padding:.8rem 1rem;border-bottom:1px solid var(--line);background:var(--card)}
h1{font-size:1.2rem;margin:0}h2{font-size:1.05rem;margin:1.2rem 0 .5rem}h3{font-size:.95rem;margin:0 0 .4rem}
main{max-width:72rem;margin:0 auto;padding:0 1rem 2rem}
.meta,.note{color:var(--dim);font-size:.85rem;margin:.2rem 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,26rem),1fr));gap:.8rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.7rem .8rem;min-width:0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.85rem}
th,td{text-align:left;padding:.3rem .4rem;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--dim);font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.85em;white-space:nowrap}
.badge{display:inline-block;border-radius:1rem;padding:0 .5rem;margin:0 .2rem .2rem 0;font-size:.8rem;
border:1px solid currentColor}
.ok{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad)}.skip{color:var(--skip)}
svg{display:block;width:100%;height:7rem;margin:.3rem 0 0;border-bottom:1px solid var(--line)}
svg .ok{fill:var(--ok)}svg .bad{fill:var(--bad)}svg .skip{fill:var(--skip)}svg .bar{fill:var(--bar)}
svg .now{fill:var(--warn)}
.ticks{display:grid;grid-template-columns:repeat(8,1fr);color:var(--dim);font-size:.75rem;margin-bottom:.4rem}
form.inline{margin:0}
button{font:inherit;padding:.3rem .8rem;border-radius:6px;border:1px solid var(--line);background:var(--card);
color:var(--ink);cursor:pointer}
.login{max-width:24rem;margin:4rem auto;padding:0 1rem}
.login input{width:100%;font:inherit;padding:.45rem;margin:.4rem 0 .8rem;border-radius:6px;
border:1px solid var(--line);background:var(--bg);color:var(--ink)}
"""


def esc(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as safe HTML text: at most ``limit`` characters, control characters as ``?``, escaped."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else "?" for c in text)
    return html.escape(text, quote=True)


def _document(title: str, body: str, *, refresh: bool) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'{meta}<title>{esc(title)}</title><link rel="icon" href="data:,"><style>{_CSS}</style></head>'
        f"<body>{body}</body></html>"
    )


def render_login(message: str | None = None) -> str:
    """The login form (with ``message`` above it, e.g. why the last try failed)."""
    note = f'<p class="bad" role="alert">{esc(message)}</p>' if message else ""
    body = (
        '<main class="login"><div class="card"><h1>Turnout gateway</h1>'
        '<p class="note">Sign in with a gateway client key to see the status page.</p>'
        f'{note}<form method="post" action="/login"><label for="key">Client key</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" required autofocus>'
        '<button type="submit">Sign in</button></form></div></main>'
    )
    return _document("Turnout gateway: sign in", body, refresh=False)


def render_page(data: PageData) -> str:
    """The status page."""
    signout = (
        '<form class="inline" method="post" action="/logout"><button type="submit">Sign out</button></form>'
        if data.signed_in
        else ""
    )
    workers = f"{data.workers} worker{'s' if data.workers != 1 else ''}"
    header = (
        '<header><div><h1>Turnout gateway</h1><p class="meta"><span class="ok">serving</span> · '
        f"{workers} · {data.in_flight} in flight · state {esc(data.state_backend)} · "
        f"up {_span(data.uptime)} · {_clock(data.now)} UTC · refreshes every {REFRESH_S} s</p></div>{signout}</header>"
    )
    body = (
        f"{header}<main>"
        f'<section id="routes"><h2>Routes</h2><div class="cards">'
        f"{''.join(_route(r, data.now) for r in data.routes)}</div></section>"
        f"{_pools(data.pools)}"
        f"{_hedging(data.hedging)}"
        f"{_money(data.money)}"
        f"{_cache(data.cache)}"
        f'<section id="attempts"><h2>Last attempts</h2><div class="card">{_attempts(data.last, data.recent)}</div>'
        "</section>"
        f'<section id="today"><h2>Today (UTC)</h2><div class="card">{_today(data)}</div></section>'
        "</main>"
    )
    return _document("Turnout gateway", body, refresh=True)


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts))


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _until(ts: float, now: float) -> str:
    return f"until {_clock(ts)} UTC (in {_span(ts - now)})"


# --- routes --------------------------------------------------------------------------------------------


def _route(route: RouteView, now: float) -> str:
    rows = "".join(
        f'<tr><td class="n">{i}</td><td><code>{esc(e.profile)}</code></td>'
        f"<td>{_model(e)}</td><td>{_entry_state(e, now)}</td></tr>"
        for i, e in enumerate(route.entries, 1)
    )
    return (
        f'<div class="card"><h3>{esc(route.name)}</h3><div class="scroll"><table><thead><tr><th class="n">#</th>'
        f"<th>profile</th><th>model</th><th>state</th></tr></thead><tbody>{rows}</tbody></table></div></div>"
    )


def _model(e: EntryView) -> str:
    return f"<code>{esc(e.model)}</code>" if e.model is not None else '<span class="note">the caller\'s model</span>'


def _entry_state(e: EntryView, now: float) -> str:
    badges = []
    if e.healthy:
        badges.append('<span class="badge ok">healthy</span>')
    if e.cooling_until is not None:
        badges.append(f'<span class="badge warn">cooling down {_until(e.cooling_until, now)}</span>')
    if e.breaker == "open" and e.breaker_until is not None:
        badges.append(f'<span class="badge bad">breaker open {_until(e.breaker_until, now)}</span>')
    elif e.breaker is not None:
        badges.append('<span class="badge warn">breaker half-open: the next call probes it</span>')
    badges.extend(_key_badge(k, now) for k in e.keys if k.dead is not None or k.cooling_until is not None)
    badges.extend(_headroom_badge(row) for row in e.headroom)
    return "".join(badges)


def _key_badge(k: KeyView, now: float) -> str:
    name = f"key <code>{esc(k.key_id, 16)}</code>"
    if k.dead == "dead" and k.dead_until is not None:
        return f'<span class="badge bad">{name} dead {_until(k.dead_until, now)}</span>'
    if k.dead == "probe_due":
        return f'<span class="badge bad">{name} dead: the next request probes it</span>'
    if k.dead == "probing":
        return f'<span class="badge bad">{name} dead: one request is probing it</span>'
    assert k.cooling_until is not None
    return f'<span class="badge warn">{name} cooling down {_until(k.cooling_until, now)}</span>'


def _headroom_badge(row: Mapping[str, Any]) -> str:
    parts = []
    for budget, limit in (("requests", "request_limit"), ("tokens", "token_limit")):
        left = row.get(budget)
        if isinstance(left, int | float):
            cap = row.get(limit)
            parts.append(f"{left:g}/{cap:g} {budget}" if isinstance(cap, int | float) else f"{left:g} {budget}")
    if not parts:
        return ""
    low = bool(row.get("low"))
    key = esc(row.get("key_id") or "-", 16)
    return (
        f'<span class="badge {"warn" if low else "skip"}">key <code>{key}</code> left: {", ".join(parts)}'
        f"{' (low)' if low else ''}</span>"
    )


def _pools(pools: Sequence[Mapping[str, Any]]) -> str:
    """Each pool with its members' load (present once the configuration has pools)."""
    if not pools:
        return ""
    cards = []
    for pool in pools:
        listed = pool.get("members")
        members = listed if isinstance(listed, list) else []
        rows = "".join(
            f"<tr><td><code>{esc(m.get('profile'))}</code></td><td class='n'>{esc(m.get('weight'))}</td>"
            f"<td class='n'>{esc(m.get('in_flight'))}</td><td class='n'>{esc(m.get('calls'))}</td>"
            f"<td class='n'>{esc(m.get('ttft_ms') if m.get('ttft_ms') is not None else '-')}</td></tr>"
            for m in members
            if isinstance(m, dict)
        )
        cards.append(
            f'<div class="card"><h3>pool {esc(pool.get("name"))} <span class="note">{esc(pool.get("strategy"))}'
            '</span></h3><div class="scroll"><table><thead><tr><th>member</th><th class="n">weight</th>'
            f'<th class="n">in flight</th><th class="n">calls</th><th class="n">ttft ms</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></div></div>"
        )
    return f'<section id="pools"><h2>Pools</h2><div class="cards">{"".join(cards)}</div></section>'


def _hedging(hedging: Mapping[str, Any] | None) -> str:
    """What hedging did (present once a profile hedges)."""
    if hedging is None:
        return ""
    rate = hedging.get("rate")
    share = f"{rate:.1%}" if isinstance(rate, int | float) else "-"
    return (
        '<section id="hedging"><h2>Hedging</h2><div class="card"><p>'
        f"Hedges sent: {esc(hedging.get('hedged'))} of {esc(hedging.get('calls'))} calls that could hedge ({share}) "
        f"· answered first: the hedge {esc(hedging.get('hedge_wins'))}, the first entry "
        f"{esc(hedging.get('original_wins'))} · budget left: {esc(hedging.get('budget_left'))}</p></div></section>"
    )


def _money(money: Mapping[str, Any] | None) -> str:
    """The ledger's health and each limited key's spend, reservations and limits (when known)."""
    if not money:
        return ""
    ledger = money.get("ledger")
    parts = []
    if isinstance(ledger, Mapping):
        if ledger.get("ok"):
            state = '<span class="ok">recording</span>'
        else:
            state = f'<span class="bad">not recording: {esc(ledger.get("problem"))}</span>'
        parts.append(
            f"<p>Ledger: {state} · {esc(ledger.get('errors'))} failed writes · "
            f"{esc(ledger.get('pending_calls'))} calls waiting · on failure: {esc(ledger.get('on_failure'))}</p>"
        )
    keys = [k for k in money.get("keys") or () if isinstance(k, Mapping)]
    if keys:
        rows = "".join(
            f"<tr><td>{esc(k.get('key'))}</td><td>{_cost(k.get('spent_usd'))}</td><td>{_cost(k.get('reserved_usd'))}"
            f"</td><td>{esc(k.get('in_flight'))}</td><td>{_cost(k.get('daily_limit_usd'))}</td>"
            f"<td>{_cost(k.get('max_call_usd'))}</td><td>{esc(k.get('rpm') or '-')}</td>"
            f"<td>{esc(k.get('tpm') or '-')}</td></tr>"
            for k in keys
        )
        parts.append(
            "<table><thead><tr><th>key</th><th>spent today</th><th>reserved</th><th>calls in flight</th>"
            f"<th>daily limit</th><th>per call</th><th>requests/min</th><th>tokens/min</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if not parts:
        return ""
    return f'<section id="spend"><h2>Spend limits</h2><div class="card">{"".join(parts)}</div></section>'


# --- attempts ------------------------------------------------------------------------------------------


def _cache(cache: Mapping[str, Mapping[str, float | None]] | None) -> str:
    """Each profile's prompt caching: cached share of its input tokens and the money saved (once one answered)."""
    if not cache:
        return ""
    rows = []
    for profile, c in cache.items():
        rate = c.get("hit_rate")
        share = f"{rate:.0%}" if isinstance(rate, float) else "–"
        rows.append(
            f"<tr><td>{esc(profile)}</td><td class='n'>{esc(c.get('input_tokens'))}</td>"
            f"<td class='n'>{esc(c.get('cached_input_tokens'))}</td><td class='n'>{share}</td>"
            f"<td class='n'>{_cost(c.get('saved_usd'))}</td></tr>"
        )
    return (
        '<section id="cache"><h2>Prompt cache</h2><div class="card"><div class="scroll"><table><thead><tr>'
        '<th>profile</th><th class="n">input tokens</th><th class="n">cached</th><th class="n">hit rate</th>'
        f'<th class="n">saved</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></div></section>'
    )


def _kind(outcome: str) -> str:
    return "ok" if outcome == "ok" else "skip" if outcome in SKIPS else "bad"


def _attempts(last: Sequence[Attempt], recent: Mapping[str, int]) -> str:
    counts = ", ".join(f"{esc(k, 40)} {n}" for k, n in sorted(recent.items())) or "none"
    summary = f'<p class="note">Attempts in the last 15 minutes: {counts}.</p>'
    if not last:
        return f'{summary}<p class="note">No attempt yet.</p>'
    rows = "".join(
        f"<tr><td>{_clock(a.started_at)}</td><td><code>{esc(a.provider)}</code></td><td><code>{esc(a.model)}</code>"
        f'</td><td class="{_kind(a.outcome)}">{esc(a.outcome, 40)}{f" ({a.status})" if a.status else ""}</td>'
        f'<td class="n">{"-" if a.outcome in SKIPS else f"{a.duration_ms:.0f}"}</td></tr>'
        for a in last
    )
    return (
        f"{summary}{latency_chart(list(reversed(last)))}<div class='scroll'><table><thead><tr><th>time (UTC)</th>"
        '<th>profile</th><th>model</th><th>outcome</th><th class="n">ms</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def latency_chart(attempts: Sequence[Attempt], width: int = 600, height: int = 120) -> str:
    """An SVG bar per attempt (oldest first): its latency, coloured by outcome (skips as a stub), with its caption."""
    if not attempts:
        return ""
    peak = max((a.duration_ms for a in attempts if a.outcome not in SKIPS), default=0.0) or 1.0
    slot = width / max(len(attempts), 20)
    bars = []
    for i, a in enumerate(attempts):
        skip = a.outcome in SKIPS
        h = 2.0 if skip else max(2.0, a.duration_ms / peak * height)
        label = f"{a.provider} {a.model}: {a.outcome}" + ("" if skip else f", {a.duration_ms:.0f} ms")
        bars.append(
            f'<rect class="{_kind(a.outcome)}" x="{i * slot + 1:.1f}" y="{height - h:.1f}" '
            f'width="{max(slot - 2, 1):.1f}" height="{h:.1f}"><title>{esc(label, 200)}</title></rect>'
        )
    return (
        f'<p class="note">Latency of each attempt, oldest first (highest: {peak:.0f} ms; grey: skipped).</p>'
        f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="Latency of the last attempts">{"".join(bars)}</svg>'
    )


# --- today ---------------------------------------------------------------------------------------------


def _today(data: PageData) -> str:
    if not data.ledger:
        return '<p class="note">The ledger is off (<code>[ledger] enabled = false</code>): no daily totals.</p>'
    day = data.day
    if day is None:
        return '<p class="warn">The ledger could not be read just now; the next refresh tries again.</p>'
    return _day_table(day) + cost_chart(day.cost_by_hour, int((data.now - day.since) // 3600))


def _cost(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:.4f}" if usd >= 0.01 else f"${usd:.6f}"


def _day_table(day: DaySummary) -> str:
    if not day.profiles:
        return '<p class="note">No call yet today.</p>'
    rows = "".join(
        f'<tr><td><code>{esc(p.profile)}</code></td><td class="n">{p.calls}</td><td class="n">{p.fallbacks}</td>'
        f'<td class="n">{p.attempts}</td><td class="n">{_cost(p.cost_usd)}</td></tr>'
        for p in day.profiles
    )
    total = (
        f'<tr><th>all</th><th class="n">{day.calls}</th><th class="n">{day.fallbacks}</th>'
        f'<th class="n">{sum(p.attempts for p in day.profiles)}</th><th class="n">{_cost(day.cost_usd)}</th></tr>'
    )
    return (
        '<div class="scroll"><table><thead><tr><th>profile</th><th class="n">calls</th>'
        '<th class="n">fallbacks</th><th class="n">attempts</th><th class="n">cost</th></tr></thead>'
        f"<tbody>{rows}{total}</tbody></table></div>"
        '<p class="note">Calls and fallbacks count by the profile a call asked for; attempts and cost by the profile '
        "that was tried.</p>"
    )


def cost_chart(by_hour: Iterable[float], hour_now: int, width: int = 600, height: int = 100) -> str:
    """An SVG bar per UTC hour of today: what its attempts cost (the current hour highlighted), with its caption."""
    hours = list(by_hour)[:24]
    peak = max(hours, default=0.0)
    slot = width / 24
    bars = []
    for h, usd in enumerate(hours):
        tall = max(usd / peak * height if peak > 0 else 0.0, 1.0)
        bar_class = "now" if h == hour_now else "bar"
        bars.append(
            f'<rect class="{bar_class}" x="{h * slot + 1:.1f}" y="{height - tall:.1f}" '
            f'width="{slot - 2:.1f}" height="{tall:.1f}"><title>{h:02d}:00 UTC: {_cost(usd)}</title></rect>'
        )
    ticks = "".join(f"<span>{h:02d}</span>" for h in range(0, 24, 3))
    return (
        f'<p class="note">Cost per hour today (UTC; highest: {_cost(peak) if peak > 0 else "$0"}).</p>'
        f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="Cost per hour today">{"".join(bars)}</svg><div class="ticks">{ticks}</div>'
    )
