"""The status page in a real headless Chromium: sign in through the form, see a cooldown the test caused, no errors.

These tests need Chromium (``make test`` installs it when run as root); without it they are skipped with a message
that says what to install.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, instant

from browser import INSTALL_HINT, Browser, chromium
from turnout import Client, Environment
from turnout.gateway import Gateway, GatewayServer
from turnout.sim import Simulator

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium() is None, reason=f"the browser tests need Chromium: {INSTALL_HINT}"),
]


@asynccontextmanager
async def demo_gateway(tmp_path: Path) -> AsyncIterator[tuple[GatewayServer, Simulator]]:
    """A gateway (with a ledger) over the simulator: openai.main falls back to anthropic.backup."""
    async with Simulator(sleep=instant) as sim:
        toml = f"""
default_provider = "openai.main"
[ledger]
path = "{tmp_path / "ledger.sqlite3"}"
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[providers.models.openai.main]
uri = "{sim.base_url("openai")}"
api_key = "sk-up-openai"
model = "gpt-4.1"
fallback = ["anthropic.backup"]
[providers.models.anthropic.backup]
uri = "{sim.base_url("anthropic")}"
api_key = "sk-up-anthropic"
model = "claude-sonnet-4-5"
"""
        client = Client.from_toml(toml, surface="gateway", env=Environment(sleep=instant))
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            yield server, sim


async def chat(server: GatewayServer) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.url}/v1/chat/completions",
            data=orjson.dumps({"model": "", "messages": MESSAGES}),
            headers={"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"},
        ) as resp,
    ):
        await resp.read()
        return resp.status


async def sign_in(browser: Browser, url: str) -> None:
    """Open the page (the login form), type the key and submit it, as a person would."""
    await browser.navigate(f"{url}/")
    assert await browser.evaluate("document.title") == "Turnout gateway: sign in"
    await browser.submit(
        f"document.querySelector('input[name=key]').value = {orjson.dumps(GATEWAY_KEY).decode()};"
        "document.querySelector('form').requestSubmit()"
    )


async def test_the_page_shows_a_cooldown_the_test_caused_with_no_console_errors(tmp_path: Path) -> None:
    """Signed in through the form, the page shows openai.main cooling down after its 429; nothing is reported."""
    async with demo_gateway(tmp_path) as (server, sim):
        sim.set_script({"models": {"gpt-4.1": {"steps": ["429-ra30"]}}})
        assert await chat(server) == 200  # served by the fallback; openai.main cools down for 30 s
        async with Browser(chromium() or "") as browser:
            await sign_in(browser, server.url)
            title = await browser.evaluate("document.title")
            text = await browser.evaluate("document.body.innerText")
            cookie_seen_by_script = await browser.evaluate("document.cookie")
            problems = browser.problems()
    assert title == "Turnout gateway"
    routes = text[text.index("Routes") : text.index("Last attempts")]
    cooling = re.search(r"1\topenai\.main\tgpt-4\.1\tcooling down until \d\d:\d\d:\d\d UTC \(in (\d+) s\)", routes)
    assert cooling is not None and 20 <= int(cooling.group(1)) <= 30, routes
    assert "anthropic.backup" in routes and "healthy" in routes
    assert "rate_limited (429)" in text
    assert cookie_seen_by_script == ""  # HttpOnly: no script can read the session
    assert problems == []


async def test_the_page_fits_a_phone_and_signs_out(tmp_path: Path) -> None:
    """At a phone's width nothing overflows sideways; Sign out ends the session and shows the form again."""
    async with demo_gateway(tmp_path) as (server, _), Browser(chromium() or "") as browser:
        assert await chat(server) == 200
        await sign_in(browser, server.url)
        await browser.send(
            "Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=3, mobile=True
        )
        await browser.navigate(f"{server.url}/")
        overflow = await browser.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        width = await browser.evaluate("window.innerWidth")
        await browser.submit("document.querySelector('form[action=\"/logout\"]').requestSubmit()")
        after = await browser.evaluate("document.title")
        problems = browser.problems()
    assert width == 390 and overflow <= 0
    assert after == "Turnout gateway: sign in"
    assert problems == []


async def test_the_pages_policy_blocks_scripts_and_outside_images_and_the_browser_reports_it(tmp_path: Path) -> None:
    """A script or an image from elsewhere put into the page is refused by its CSP, and the refusal is reported."""
    async with demo_gateway(tmp_path) as (server, _), Browser(chromium() or "") as browser:
        await sign_in(browser, server.url)
        assert browser.problems() == []
        ran = await browser.evaluate(
            "const s = document.createElement('script'); s.textContent = 'window.injected = 1';"
            "document.body.appendChild(s);"
            "const i = document.createElement('img'); i.src = 'http://127.0.0.1:9/pixel.png';"
            "document.body.appendChild(i); window.injected === 1"
        )
        refused = ("script-src", "img-src")  # the directives the two refusals name (script-src falls to default-src)

        def reported() -> bool:
            csp = [p for p in browser.problems() if "Content Security Policy" in p]
            return all(any(d in p or (d == "script-src" and "script" in p) for p in csp) for d in refused)

        await browser.until(reported)
        problems = browser.problems()
    assert ran is False
    assert any("Content Security Policy" in p and "script" in p for p in problems), problems
    assert any("Content Security Policy" in p and "img-src" in p for p in problems), problems
