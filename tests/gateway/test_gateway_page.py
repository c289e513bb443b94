"""The status page: login with a client key into a signed cookie that opens the page only, and what the page shows."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
from gateway_support import GATEWAY_KEY, TWO_PROFILES, Raw, fake_gateway

from fakes import FakeClock, Fleet, err
from turnout.core.attribution import Attempt
from turnout.gateway import GatewayServer
from turnout.gateway.page_data import EntryView, KeyView, PageData, RouteView
from turnout.gateway.page_html import render_page
from turnout.gateway.signin import COOKIE, MAX_FORM_BYTES, TTL_S, PageSessions
from turnout.ledger.writer import DaySummary, ProfileDay
from turnout.walk.hedge import HedgeTally, hedging_status

BASE = TWO_PROFILES
CHAT = {"model": "", "messages": [{"role": "user", "content": "hello"}]}
HOSTILE = '<img src=x onerror="alert(1)">'


@asynccontextmanager
async def served(fleet: Fleet, text: str = BASE, **options: Any) -> AsyncIterator[tuple[GatewayServer, FakeClock]]:
    """A gateway over fake adapters whose clock (sessions' expiry included) is the fake clock."""
    async with fake_gateway(text, fleet, **options) as (server, clock):
        server.gateway.page.sessions.clock = clock
        yield server, clock


async def fetch(
    server: GatewayServer,
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    key: str | None = None,
    form: dict[str, str] | bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Raw:
    """One request without following redirects, with an optional session cookie, bearer key or form."""
    hdrs = dict(headers or {})
    if cookie is not None:
        hdrs["Cookie"] = f"{COOKIE}={cookie}"
    if key is not None:
        hdrs["Authorization"] = f"Bearer {key}"
    data: Any = form
    if isinstance(form, bytes):
        hdrs.setdefault("Content-Type", "application/x-www-form-urlencoded")
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, server.url + path, headers=hdrs, data=data, allow_redirects=False) as resp,
    ):
        return Raw(resp.status, resp.headers, await resp.read())


def session_cookie(raw: Raw) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    for value in raw.headers.getall("Set-Cookie", []):
        jar.load(value)
    return jar


async def login(server: GatewayServer, key: str = GATEWAY_KEY) -> str:
    """Sign in through the form; the session token of the cookie set."""
    raw = await fetch(server, "POST", "/login", form={"key": key})
    assert raw.status == 303, raw.body
    return session_cookie(raw)[COOKIE].value


async def test_without_credentials_the_page_is_the_login_form() -> None:
    """GET / without a key or a session shows the form (no state), with the page's security headers."""
    async with served(Fleet()) as (server, _):
        raw = await fetch(server, "GET", "/")
    text = raw.body.decode()
    assert raw.status == 200
    assert '<form method="post" action="/login">' in text and 'name="key"' in text
    assert "anthropic.prod" not in text
    assert raw.headers["Content-Security-Policy"].startswith("default-src 'none'; style-src 'unsafe-inline'")
    assert "frame-ancestors 'none'" in raw.headers["Content-Security-Policy"]
    assert raw.headers["X-Frame-Options"] == "DENY"
    assert raw.headers["Cache-Control"] == "no-store"
    assert "<script" not in text


async def test_a_client_key_opens_the_page_as_it_opens_status() -> None:
    """GET / with the same bearer key /status takes shows every route and its entries."""
    async with served(Fleet()) as (server, _):
        raw = await fetch(server, "GET", "/", key=GATEWAY_KEY)
    text = raw.body.decode()
    assert raw.status == 200
    assert "<h3>default</h3>" in text and "<h3>hint:cheap</h3>" in text
    assert text.count("<code>anthropic.prod</code>") == 1 and text.count("<code>openai.backup</code>") == 2
    assert 'http-equiv="refresh"' in text and 'name="viewport"' in text
    assert "Sign out" not in text  # no session to end


async def test_login_sets_a_signed_httponly_strict_cookie_that_opens_the_page() -> None:
    """A right key in the form: 303 to / and a cookie holding a signed token (not the key) that opens the page."""
    async with served(Fleet()) as (server, _):
        raw = await fetch(server, "POST", "/login", form={"key": f"  {GATEWAY_KEY} "})
        jar = session_cookie(raw)
        page = await fetch(server, "GET", "/", cookie=jar[COOKIE].value)
    morsel = jar[COOKIE]
    assert raw.status == 303 and raw.headers["Location"] == "/"
    assert morsel["httponly"] is True and morsel["samesite"] == "Strict" and morsel["path"] == "/"
    assert not morsel["secure"]  # plain HTTP here; over TLS it is Secure
    assert int(morsel["max-age"]) == int(TTL_S)
    assert GATEWAY_KEY not in morsel.value
    assert page.status == 200 and "Sign out" in page.body.decode() and "<h3>default</h3>" in page.body.decode()


async def test_a_wrong_key_gets_the_form_again_and_no_cookie() -> None:
    """A wrong key: 401, the form with a message, no cookie; the key is not echoed."""
    async with served(Fleet()) as (server, _):
        raw = await fetch(server, "POST", "/login", form={"key": "wrong-key-VALUE"})
        empty = await fetch(server, "POST", "/login", form={"key": ""})
    text = raw.body.decode()
    assert raw.status == 401 and empty.status == 401
    assert "That key is not accepted." in text and '<form method="post" action="/login">' in text
    assert "wrong-key-VALUE" not in text
    assert "Set-Cookie" not in raw.headers and "Set-Cookie" not in empty.headers


async def test_the_session_cookie_does_not_authorise_the_api_status_or_metrics() -> None:
    """A signed-in browser's cookie opens the page only: /v1/*, /status and /metrics still want a key."""
    async with served(Fleet()) as (server, _):
        token = await login(server)
        chat = await fetch(
            server,
            "POST",
            "/v1/chat/completions",
            cookie=token,
            form=b'{"model": "", "messages": [{"role": "user", "content": "hi"}]}',
            headers={"Content-Type": "application/json"},
        )
        models = await fetch(server, "GET", "/v1/models", cookie=token)
        status = await fetch(server, "GET", "/status", cookie=token)
        metrics = await fetch(server, "GET", "/metrics", cookie=token)
    assert [r.status for r in (chat, models, status, metrics)] == [401, 401, 401, 401]


async def test_an_expired_or_tampered_token_gets_the_form() -> None:
    """A token past its expiry, or with a changed name, expiry or signature, is refused."""
    async with served(Fleet()) as (server, clock):
        token = await login(server)
        assert "Sign out" in (await fetch(server, "GET", "/", cookie=token)).body.decode()
        name, expiry, sid, generation, mac = token.split(".")

        def changed(part: str) -> str:  # its last character replaced by another one (never the same)
            return part[:-1] + ("B" if part.endswith("A") else "A")

        tampered = [
            f"{name}.{int(expiry) + 3600}.{sid}.{generation}.{mac}",
            f"{changed(name)}.{expiry}.{sid}.{generation}.{mac}",
            f"{name}.{expiry}.{changed(sid)}.{generation}.{mac}",
            f"{name}.{expiry}.{sid}.{changed(generation)}.{mac}",
            f"{name}.{expiry}.{sid}.{generation}.{changed(mac)}",
            f"{name}.{expiry}.{sid}.{generation}.",
            "not-a-token",
        ]
        answers = [await fetch(server, "GET", "/", cookie=t) for t in tampered]
        clock.now += TTL_S
        expired = await fetch(server, "GET", "/", cookie=token)
    for raw in [*answers, expired]:
        assert (
            raw.status == 200 and 'action="/login"' in raw.body.decode() and "<h3>default</h3>" not in raw.body.decode()
        )


async def test_a_token_of_another_server_or_an_unconfigured_caller_is_refused() -> None:
    """Only this server's secret signs; a validly signed token for a caller that has no key here is refused too."""
    async with served(Fleet()) as (server, _):
        other = PageSessions().issue("d0d0d0d0")
        mine_unknown = server.gateway.page.sessions.issue("not-a-configured-caller")
        answers = [await fetch(server, "GET", "/", cookie=t) for t in (other, mine_unknown)]
    assert all('action="/login"' in r.body.decode() for r in answers)


async def test_logout_clears_the_cookie() -> None:
    """POST /logout expires the cookie and goes back to /."""
    async with served(Fleet()) as (server, _):
        raw = await fetch(server, "POST", "/logout", cookie=await login(server))
    morsel = session_cookie(raw)[COOKIE]
    assert raw.status == 303 and raw.headers["Location"] == "/"
    assert morsel.value == "" and morsel["max-age"] == "0"


async def test_login_and_logout_from_another_sites_page_are_refused() -> None:
    """A form posted from another origin (login CSRF) gets 403 and no cookie; the gateway's own page is accepted."""
    async with served(Fleet()) as (server, _):
        foreign = [{"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}]
        refused = [await fetch(server, "POST", "/login", form={"key": GATEWAY_KEY}, headers=h) for h in foreign]
        out = await fetch(server, "POST", "/logout", headers=foreign[0])
        own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
        same = await fetch(server, "POST", "/login", form={"key": GATEWAY_KEY}, headers=own)
    assert [r.status for r in refused] == [403, 403, 403]
    assert all("Set-Cookie" not in r.headers for r in refused)
    assert out.status == 403
    assert same.status == 303


async def test_an_oversized_or_foreign_login_body_is_refused() -> None:
    """The login body is bounded and must be a form."""
    async with served(Fleet()) as (server, _):
        big = await fetch(server, "POST", "/login", form=b"key=" + b"x" * MAX_FORM_BYTES)
        json = await fetch(server, "POST", "/login", form=b'{"key": "k"}', headers={"Content-Type": "application/json"})
    assert big.status == 400 and json.status == 400


async def test_an_open_gateway_shows_the_page_without_login() -> None:
    """Without any client key configured, the page is as open as /status."""
    open_config = BASE.replace(f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n', "")
    async with served(Fleet(), open_config) as (server, _):
        raw = await fetch(server, "GET", "/")
    assert raw.status == 200 and "<h3>default</h3>" in raw.body.decode()


async def test_the_page_shows_cooldowns_dead_keys_and_the_last_attempts() -> None:
    """A profile cooling down and a profile's dead keys show with their ends; the last attempts are listed."""
    fleet = Fleet(anthropic__prod=[err(401, "bad key")], openai__backup=[err(429, headers={"retry-after": "30"})])
    async with served(fleet) as (server, clock):  # the fake clock starts at 1_000_000 s: 13:46:40 UTC
        await _chat(server)  # both keys rejected (suspected); the fallback is rate-limited: 30 s cooldown
        clock.now += 1
        await _chat(server)  # another call confirms the keys dead (60 s); the fallback is skipped
        clock.now += 4
        text = (await fetch(server, "GET", "/", key=GATEWAY_KEY)).body.decode()
    routes = text[text.index('id="routes"') : text.index('id="attempts"')]
    assert routes.count("cooling down until 13:47:10 UTC (in 25 s)") == 2  # openai.backup in both routes
    assert routes.count("dead until 13:47:41 UTC (in 56 s)") == 2  # anthropic.prod's two keys
    assert routes.count("healthy") == 0
    attempts = text[text.index('id="attempts"') :]
    assert attempts.count("non_retryable (401)") == 4 and attempts.count("rate_limited (429)") == 1
    assert "cooldown_skip" in attempts


async def test_the_page_shows_an_open_breaker() -> None:
    """An entry whose breaker opened shows until when; the other entries stay healthy."""
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=["ok"])
    async with served(fleet) as (server, _):
        for _ in range(3):
            await _chat(server)  # three calls failing on the primary (two tries each): the third opens it (5 s)
        text = (await fetch(server, "GET", "/", key=GATEWAY_KEY)).body.decode()
    routes = text[text.index('id="routes"') : text.index('id="attempts"')]
    # opened after three backoffs of the fake clock (jittered: 0.75 to 1.5 s after it started at 13:46:40)
    assert re.search(r"breaker open until 13:46:4[56] UTC \(in 5 s\)", routes), routes
    assert routes.count("healthy") == 2  # openai.backup in both routes


async def _chat(server: GatewayServer) -> Raw:
    return await fetch(
        server,
        "POST",
        "/v1/chat/completions",
        key=GATEWAY_KEY,
        form=b'{"model": "", "messages": [{"role": "user", "content": "hi"}]}',
        headers={"Content-Type": "application/json"},
    )


async def test_the_page_shows_todays_calls_fallbacks_and_cost_from_the_ledger(tmp_path: Path) -> None:
    """With a ledger, today's (UTC) calls, fallbacks and attempts per profile are listed, with a cost chart."""
    ledger = f'[ledger]\npath = "{tmp_path / "ledger.sqlite3"}"\n'
    text = BASE.replace("[ledger]\nenabled = false\n", ledger)
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=["from backup"])
    async with served(fleet, text, ledger=True) as (server, _):
        for _ in range(3):
            assert (await _chat(server)).status == 200
        page = (await fetch(server, "GET", "/", key=GATEWAY_KEY)).body.decode()
    today = page[page.index('id="today"') :]
    assert '<tr><td><code>anthropic.prod</code></td><td class="n">3</td><td class="n">3</td>' in today
    assert (
        '<tr><td><code>openai.backup</code></td><td class="n">0</td><td class="n">0</td><td class="n">3</td>' in today
    )
    assert 'aria-label="Cost per hour today"' in today


async def test_with_the_ledger_off_the_page_says_so() -> None:
    """The page works without a ledger and says there are no daily totals."""
    async with served(Fleet()) as (server, _):
        text = (await fetch(server, "GET", "/", key=GATEWAY_KEY)).body.decode()
    assert "The ledger is off" in text


def _data(**changes: Any) -> PageData:
    values: dict[str, Any] = {
        "now": 1_000_000.0,
        "uptime": 5.0,
        "workers": 1,
        "in_flight": 0,
        "state_backend": "memory",
        "routes": (),
        "last": (),
        "recent": {},
        "ledger": False,
    }
    values.update(changes)
    return PageData(**values)


def test_strings_from_clients_and_upstreams_are_escaped_and_bounded() -> None:
    """A hostile model name (a client's choice) and headroom key are escaped and cut; no markup gets through."""
    attempt = Attempt(provider="openai.main", model=HOSTILE + "x" * 5000, outcome="ok", started_at=1.0, duration_ms=3)
    entry = EntryView(
        profile="openai.main",
        model=None,
        keys=(KeyView(key_id="<b>k</b>", cooling_until=1_000_010.0),),
        headroom=({"profile": "openai.main", "key_id": "<i>", "requests": 3, "request_limit": None},),
    )
    routes = (RouteView(name="hint:<script>", entries=(entry,)),)
    day = DaySummary(
        since=0.0,
        profiles=(ProfileDay(profile=HOSTILE, calls=1, fallbacks=0, attempts=1, cost_usd=0.5),),
        cost_by_hour=(0.0,) * 24,
    )
    text = render_page(_data(last=(attempt,), routes=routes, ledger=True, day=day, recent={"<u>": 1}))
    assert "<img" not in text and "<script" not in text and "<b>" not in text and "<i>" not in text
    assert "<u>" not in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text
    assert "x" * 200 not in text  # bounded
    assert len(text) < 30_000


def test_an_empty_gateway_renders_a_page_that_says_so() -> None:
    """No attempts yet and no calls today: the page says so instead of drawing empty charts."""
    day = DaySummary(since=0.0, profiles=(), cost_by_hour=(0.0,) * 24)
    text = render_page(_data(ledger=True, day=day))
    assert "No attempt yet." in text and "No call yet today." in text
    assert 'aria-label="Latency of the last attempts"' not in text


def test_an_unreadable_ledger_is_said_on_the_page() -> None:
    """With the ledger on but unreadable in time, the page says the next refresh tries again."""
    assert "could not be read" in render_page(_data(ledger=True, day=None))


def test_pools_are_shown_with_their_members() -> None:
    """Pool rows of the client's status (when the configuration has pools) are listed with each member's load."""
    pool = {
        "name": "fast<x>",
        "strategy": "latency",
        "members": [{"profile": "openai.a", "weight": 1, "in_flight": 2, "calls": 7, "ttft_ms": 120.5}],
    }
    text = render_page(_data(pools=(pool,)))
    assert 'id="pools"' in text and "pool fast&lt;x&gt;" in text and "<code>openai.a</code>" in text
    assert 'id="pools"' not in render_page(_data())


def test_hedging_is_shown_once_a_profile_hedges() -> None:
    """The hedging card says hedges, calls, the rate, who answered first and the budget left; absent when off."""
    tally = HedgeTally(calls=40, hedged=3, hedge_wins=2, original_wins=1, budget=1.25)
    text = render_page(_data(hedging=hedging_status(tally)))
    assert 'id="hedging"' in text
    assert "Hedges sent: 3 of 40 calls that could hedge (7.5%)" in text
    assert "answered first: the hedge 2, the first entry 1 · budget left: 1.25" in text
    assert 'id="hedging"' not in render_page(_data())
