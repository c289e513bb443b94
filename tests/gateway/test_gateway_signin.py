"""Status page sessions that end: logout revokes on every worker, a rotated key ends them, logins are throttled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
from gateway_support import GATEWAY_KEY, TWO_PROFILES, Raw, get, sample

from fakes import FakeClock, Fleet
from turnout import Client
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.signin import COOKIE, FREE_FAILURES, LoginThrottle, new_secret
from turnout.gateway.workers import Peers

OPS_KEY = "gw-ops-key-1"
ROTATED = "gw-ops-key-2"
NAMED = TWO_PROFILES + '[gateway.keys.ops]\nkey = "{key}"\n'


@asynccontextmanager
async def servers(
    text: str, *, count: int = 1, directory: Path | None = None, secret: bytes | None = None
) -> AsyncIterator[list[GatewayServer]]:
    """``count`` gateways over fake adapters, sharing one workers directory and session secret when given."""
    async with AsyncExitStack() as stack:
        out = []
        for i in range(count):
            client = Client.from_toml(text, adapter_builder=Fleet(), surface="gateway", ledger=False)
            peers = Peers(directory, worker=f"w{i}") if directory is not None else None
            gateway = Gateway(client, owns_client=True, peers=peers, session_secret=secret)
            out.append(await stack.enter_async_context(GatewayServer(gateway)))
        yield out


async def fetch(server: GatewayServer, method: str, path: str, *, cookie: str | None = None, **kw: Any) -> Raw:
    headers = {"Cookie": f"{COOKIE}={cookie}"} if cookie is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, server.url + path, headers=headers, allow_redirects=False, **kw) as resp,
    ):
        return Raw(resp.status, resp.headers, await resp.read())


async def login(server: GatewayServer, key: str = GATEWAY_KEY) -> Raw:
    return await fetch(server, "POST", "/login", data={"key": key})


def token(raw: Raw) -> str:
    assert raw.status == 303, raw.body
    jar: SimpleCookie = SimpleCookie()
    for value in raw.headers.getall("Set-Cookie", []):
        jar.load(value)
    return jar[COOKIE].value


def signed_in(raw: Raw) -> bool:
    return raw.status == 200 and "Sign out" in raw.body.decode()


async def test_logout_revokes_the_session_so_the_old_cookie_no_longer_opens_the_page() -> None:
    """After POST /logout the same cookie, replayed, gets the login form: the server ended the session."""
    async with servers(TWO_PROFILES) as (server,):
        cookie = token(await login(server))
        before = await fetch(server, "GET", "/", cookie=cookie)
        out = await fetch(server, "POST", "/logout", cookie=cookie)
        after = await fetch(server, "GET", "/", cookie=cookie)
        again = await fetch(server, "GET", "/", cookie=token(await login(server)))
    assert signed_in(before)
    assert out.status == 303
    assert not signed_in(after) and 'action="/login"' in after.body.decode()
    assert signed_in(again)  # a new sign-in is a new session


async def test_a_logout_on_one_worker_ends_the_session_on_the_others(tmp_path: Path) -> None:
    """Two workers of one server (one secret, one directory): logout on one, the other refuses the cookie."""
    async with servers(TWO_PROFILES, count=2, directory=tmp_path, secret=new_secret()) as (first, second):
        cookie = token(await login(first))
        shared = await fetch(second, "GET", "/", cookie=cookie)
        await fetch(first, "POST", "/logout", cookie=cookie)
        after = await fetch(second, "GET", "/", cookie=cookie)
    assert signed_in(shared)
    assert not signed_in(after)


async def test_a_rotated_or_removed_key_ends_its_sessions() -> None:
    """A worker started again with the ops key rotated (same name, same secret) refuses the old key's cookie."""
    secret = new_secret()
    async with servers(NAMED.format(key=OPS_KEY), secret=secret) as (old,):
        cookie = token(await login(old, OPS_KEY))
        assert signed_in(await fetch(old, "GET", "/", cookie=cookie))
    async with servers(NAMED.format(key=ROTATED), secret=secret) as (rotated,):
        after_rotation = await fetch(rotated, "GET", "/", cookie=cookie)
        fresh = await fetch(rotated, "GET", "/", cookie=token(await login(rotated, ROTATED)))
    async with servers(TWO_PROFILES, secret=secret) as (removed,):
        after_removal = await fetch(removed, "GET", "/", cookie=cookie)
    assert not signed_in(after_rotation)
    assert signed_in(fresh)
    assert not signed_in(after_removal)


async def test_wrong_keys_make_the_next_login_wait_longer_each_time_and_are_counted() -> None:
    """After the free failures each wrong key doubles the wait; during it even the right key gets 429 Retry-After."""
    clock = FakeClock()
    async with servers(TWO_PROFILES) as (server,):
        server.gateway.page.throttle.clock = clock
        wrong = [(await login(server, f"guess-{i}")).status for i in range(FREE_FAILURES + 1)]
        held = await login(server)  # the right key, but the wait is not over: not checked
        clock.now += 1.0
        second_wrong = await login(server, "guess-again")
        clock.now += 1.0
        still_held = await login(server)
        clock.now += 1.0
        allowed = await login(server)
        metrics = (await get(server, "/metrics")).body.decode()
    assert wrong == [401] * (FREE_FAILURES + 1)
    assert held.status == 429 and held.headers["Retry-After"] == "1"
    assert second_wrong.status == 401
    assert still_held.status == 429 and still_held.headers["Retry-After"] == "1"  # 2 s after the 7th failure
    assert allowed.status == 303
    assert sample(metrics, "turnout_gateway_logins_total", outcome="wrong_key") == FREE_FAILURES + 2
    assert sample(metrics, "turnout_gateway_logins_total", outcome="throttled") == 2
    assert sample(metrics, "turnout_gateway_logins_total", outcome="ok") == 1


def test_one_key_guessed_from_many_addresses_is_throttled_too() -> None:
    """The limit also counts per presented key, so spreading guesses of one key over addresses does not escape it."""
    clock = FakeClock()
    throttle = LoginThrottle(clock=clock)
    for i in range(FREE_FAILURES + 1):
        throttle.failed(f"10.0.0.{i}", "the-same-guess")
    assert throttle.wait("10.9.9.9", "the-same-guess") == 1.0
    assert throttle.wait("10.9.9.9", "another-guess") == 0.0
    for _ in range(20):
        throttle.failed("10.0.0.1", "x")
    assert throttle.wait("10.0.0.1", "y") == throttle.max_delay  # the wait grows to its bound, no further
