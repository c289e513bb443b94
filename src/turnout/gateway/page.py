"""The status page: ``GET /`` (the page, or the login form), ``POST /login`` and ``POST /logout``.

The page takes the same credentials as ``/status`` (a gateway client key, as ``Authorization: Bearer`` or
``x-api-key``) or a session cookie made by ``POST /login`` from a key typed into the form
(:mod:`turnout.gateway.signin`); an open gateway (no client key configured) shows it to anyone, as it does
``/status``. The key is checked by the gateway's :class:`~turnout.gateway.auth.Authenticator` (constant time,
every key compared), so a wrong key in the form fails exactly as a wrong bearer key does, and gets the form
again. Logins and logouts posted from another site's page are refused (``Sec-Fetch-Site`` or ``Origin`` says
where the form was). Sign-in attempts are rate limited per client address and per key
(:class:`~turnout.gateway.signin.LoginThrottle`: 429 with ``Retry-After``); logout revokes the session on the
server, and a session ends when its key is rotated or removed.

Every answer carries a strict Content-Security-Policy (nothing but inline styles and ``data:`` images: the page
has no script), refuses to be framed, and is not cached.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from turnout.client import Client
from turnout.gateway.access import Caller
from turnout.gateway.auth import Authenticator
from turnout.gateway.metrics import cache_by_profile
from turnout.gateway.page_data import LedgerDay, PageData, newest_first, route_views
from turnout.gateway.page_html import render_login, render_page
from turnout.gateway.signin import COOKIE, LoginThrottle, PageSessions, read_form
from turnout.gateway.status import RecentAttempts
from turnout.gateway.workers import Totals
from turnout.walk.hedge import hedging_status
from turnout.walk.pools import pools_status

#: The headers of every answer of the page's routes.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # a browser then sends the page's own Origin with the login form
    "Cache-Control": "no-store",
}
WRONG_KEY = "That key is not accepted."
BAD_FORM = "The sign-in form could not be read; try again."
OTHER_SITE = "Sign-in from another site's page is refused."
TOO_MANY = "Too many wrong keys; wait {seconds} s before the next try."

#: What a page handler returns: the answer, and the caller it was made for (None: not signed in).
Answer = tuple[web.Response, Caller | None]


def html_response(text: str, status: int = 200) -> web.Response:
    """An HTML answer with the page's headers."""
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS)


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={**PAGE_HEADERS, "Location": location})


class StatusPage:
    """The page's routes over one gateway.

    Args:
        client: The gateway's client (routes, state, ledger).
        auth: The gateway's key check.
        view: The whole server's totals (:meth:`turnout.gateway.app.Gateway.view`).
        recent: The gateway's recent-attempt counter (its window).
        sessions: Signs and checks session tokens (default: with a secret of this process).
        started: When the gateway started (wall-clock seconds).
        throttle: The sign-in rate limit (default: a new one).
        count_login: Counts a sign-in attempt by outcome (``ok``, ``wrong_key``, ``throttled``).
    """

    def __init__(
        self,
        client: Client,
        auth: Authenticator,
        view: Callable[[], Awaitable[Totals]],
        recent: RecentAttempts,
        *,
        sessions: PageSessions | None = None,
        started: float | None = None,
        money: Callable[[], Mapping[str, Any]] | None = None,
        throttle: LoginThrottle | None = None,
        count_login: Callable[[str], None] | None = None,
    ) -> None:
        self._money = money  # the ledger's health and each limited key's spend (``Gateway.money``)
        self.client = client
        self.auth = auth
        self.sessions = sessions if sessions is not None else PageSessions()
        self.throttle = throttle if throttle is not None else LoginThrottle()
        self._count_login = count_login
        self._view = view
        self._recent = recent
        self._day = LedgerDay(client.ledger, client.factory.env.clock) if client.ledger is not None else None
        self._started = time.time() if started is None else started

    def _signed_in(self, request: web.Request) -> Caller | None:
        """The caller of a valid, unrevoked session cookie whose key is still configured and not rotated."""
        session = self.sessions.session(request.cookies.get(COOKIE))
        if session is None:
            return None
        caller = next((c for c in self.auth.callers() if c.name == session.caller), None)
        if caller is None or session.generation != self.sessions.generation(self.auth.digest(caller.name)):
            return None
        return caller

    def _counted(self, outcome: str) -> None:
        if self._count_login is not None:
            self._count_login(outcome)

    async def show(self, request: web.Request) -> Answer:
        """``GET /``: the page for a client key or a session; else the login form."""
        headers = request.headers
        caller = self.auth.caller(headers.get("Authorization"), headers.get("x-api-key"))
        signed_in = False
        if caller is None:
            caller = self._signed_in(request)
            signed_in = caller is not None
        if caller is None:
            return html_response(render_login()), None
        return html_response(render_page(await self.gather(signed_in=signed_in))), caller

    async def login(self, request: web.Request) -> Answer:
        """``POST /login``: a key from the form; a session cookie and the page, or the form again."""
        if not _same_origin(request):
            return html_response(render_login(OTHER_SITE), 403), None
        form = await read_form(request)
        if form is None:
            return html_response(render_login(BAD_FORM), 400), None
        if self.auth.open:
            return _see_other("/"), None
        key = form.get("key", "").strip()
        address = request.remote or ""
        wait = self.throttle.wait(address, key)
        if wait > 0:  # the key is not even checked
            self._counted("throttled")
            seconds = max(1, math.ceil(wait))
            response = html_response(render_login(TOO_MANY.format(seconds=seconds)), 429)
            response.headers["Retry-After"] = str(seconds)
            return response, None
        caller = self.auth.caller(None, key)
        if caller is None:
            self.throttle.failed(address, key)
            self._counted("wrong_key")
            response = html_response(render_login(WRONG_KEY), 401)
            response.headers["WWW-Authenticate"] = 'Bearer realm="turnout"'
            return response, None
        self.throttle.succeeded(address, key)
        self._counted("ok")
        response = _see_other("/")
        token = self.sessions.issue(caller.name, self.auth.digest(caller.name))
        self.sessions.set_cookie(response, token, secure=request.secure)
        return response, caller

    async def logout(self, request: web.Request) -> Answer:
        """``POST /logout``: revoke the session on the server, forget the cookie, back to the form."""
        if not _same_origin(request):
            return html_response(render_login(OTHER_SITE), 403), None
        session = self.sessions.session(request.cookies.get(COOKIE))
        if session is not None:
            self.sessions.revocations.revoke(session)
        response = _see_other("/")
        self.sessions.clear_cookie(response, secure=request.secure)
        return response, None

    async def gather(self, *, signed_in: bool = False) -> PageData:
        """What the page shows now."""
        totals = await self._view()
        now = self.client.factory.env.clock()
        return PageData(
            now=now,
            uptime=time.time() - self._started,
            workers=len(totals.workers),
            in_flight=totals.in_flight,
            state_backend=self.client.config.state.backend,
            routes=route_views(self.client, totals, now),
            last=newest_first(totals.last),
            recent=self._recent.snapshot(totals.recent)["by_outcome"],
            ledger=self._day is not None,
            day=await self._day.read() if self._day is not None else None,
            pools=tuple(pools_status(self.client.factory.pool_specs.values(), totals.pools)),
            hedging=hedging_status(totals.hedging) if totals.hedging is not None else None,
            cache=cache_by_profile(totals.counters),
            signed_in=signed_in,
            money=self._money() if self._money is not None else None,
        )


def _same_origin(request: web.Request) -> bool:
    """False for a browser's form post from another site: its ``Sec-Fetch-Site`` or ``Origin`` says so.

    A request with neither header (not a browser's) passes; an ``Origin`` of ``null`` does not.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host
