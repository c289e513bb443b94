"""Regenerate ``docs/images/status-page.png``: the gateway's status page over the demo's profiles, in Chromium.

Starts the simulator and a gateway over the demo's configuration (``turnout.cli.demo.DEMO_CONFIG``, a ledger in a
temporary directory) on loopback, sends a scripted series of requests through the gateway (the default
profile rate-limited and cooling down while its fallback serves and announces its rate-limit headroom, an outage
that opens a hint route's circuit breaker), signs in through the page's form in headless Chromium (the tests'
DevTools driver, ``tests/browser.py``) and saves a screenshot of the whole page. Nothing leaves loopback.

Run it with ``.venv/bin/python scripts/status_page_screenshot.py [output.png]`` (needs Chromium).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser import INSTALL_HINT, Browser, chromium  # noqa: E402
from turnout import Client, Environment  # noqa: E402
from turnout.cli.demo import demo_config  # noqa: E402
from turnout.gateway import Gateway, GatewayServer  # noqa: E402
from turnout.sim import Simulator  # noqa: E402

OUTPUT = ROOT / "docs" / "images" / "status-page.png"
KEY = "demo-status-page-key"
WIDTH = 1200
SCRIPT = {
    "models": {
        "claude-sonnet-4-5": {"steps": ["ok", "429-ra30"]},
        "deepseek-reasoner": {"steps": ["ok-r12-t20", "503"]},
        "gpt-4.1": {"steps": ["ok"], "headroom": {"requests": 40, "tokens": 90000, "window": 60}},
    }
}
#: The requests sent through the gateway, in order: the ``model`` of each.
REQUESTS = [
    *["", "hint:reasoning", "", "hint:reasoning", "openai.solo", "hint:reasoning", "", "openai.solo", ""],
    *["hint:pool"] * 4,
]


async def instant(seconds: float) -> None:
    """Backoffs and Retry-After waits take no time (the picture is of the state, not of the waiting)."""
    await asyncio.sleep(0)


async def send(session: aiohttp.ClientSession, url: str, model: str) -> int:
    """One chat request through the gateway; its status."""
    body = {"model": model, "messages": [{"role": "user", "content": "Summarise the release notes."}]}
    async with session.post(
        f"{url}/v1/chat/completions",
        data=orjson.dumps(body),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    ) as resp:
        await resp.read()
        return resp.status


async def capture(exe: str) -> bytes | None:
    """Make the demo state, sign in and take the picture (None when the page reported a problem)."""
    with tempfile.TemporaryDirectory(prefix="turnout-screenshot-") as tmp:
        async with Simulator(script=SCRIPT, sleep=instant) as sim:
            config = demo_config(sim, Path(tmp) / "ledger.sqlite3", open_secs=30)
            client = Client.from_toml(config, surface="gateway", env=Environment(sleep=instant))
            async with GatewayServer(Gateway(client, keys=[KEY], owns_client=True)) as server:
                async with aiohttp.ClientSession() as session:
                    statuses = [await send(session, server.url, model) for model in REQUESTS]
                print("requests:", " ".join(map(str, statuses)))
                async with Browser(exe) as browser:
                    await browser.send(
                        "Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False
                    )
                    await browser.navigate(f"{server.url}/")
                    await browser.submit(
                        f"document.querySelector('input[name=key]').value = {orjson.dumps(KEY).decode()};"
                        "document.querySelector('form').requestSubmit()"
                    )
                    png = await browser.screenshot(width=WIDTH)
                    problems = browser.problems()
    if problems:
        print("the page reported:", *problems, sep="\n  ", file=sys.stderr)
        return None
    return png


def main(output: Path) -> int:
    """Write the picture to ``output``; 1 without Chromium or when the page reported a problem."""
    exe = chromium()
    if exe is None:
        print(f"status_page_screenshot: {INSTALL_HINT}", file=sys.stderr)
        return 1
    png = asyncio.run(capture(exe))
    if png is None:
        return 1
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(png)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT))
