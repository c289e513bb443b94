"""Two `turnout serve` processes sharing cooldowns and dead keys through one Redis (issue: scale-out)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, config, profile
from test_gateway_process import _LISTENING, serve

from turnout.sim import Simulator

pytestmark = [pytest.mark.slow, pytest.mark.redis]

HEADERS = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}


async def ask(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.post(
        f"{url}/v1/chat/completions", data=orjson.dumps({"model": "", "messages": MESSAGES}), headers=HEADERS
    ) as resp:
        await resp.read()
        return resp.status, resp.headers.get("x-turnout-provider", "")


async def status(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with session.get(f"{url}/status", headers=HEADERS) as resp:
        data: dict[str, object] = await resp.json()
        return data


async def until_status(session: aiohttp.ClientSession, url: str, check: object, within: float = 5.0) -> None:
    """Ask a gateway's /status until ``check(status)`` holds (each ask is a request, not a sleep)."""
    async with asyncio.timeout(within):
        while not check(await status(session, url)):  # type: ignore[operator]
            pass


def cooling(profile_name: str) -> object:
    def check(data: dict[str, object]) -> bool:
        return profile_name in str(data.get("cooldowns", {}))

    return check


async def test_two_gateways_share_a_cooldown_through_redis(tmp_path: Path, redis_url: str) -> None:
    """A 429 seen by one gateway process makes the other skip that profile: one upstream hit in all."""
    prefix = f"t-{uuid.uuid4().hex[:8]}:"
    async with Simulator() as sim:
        state = f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "{prefix}"\n'
        toml = config(
            "openai.primary",
            profile(sim, "openai.primary", "sim-429-ra30", extra='fallback = ["anthropic.backup"]\n'),
            profile(sim, "anthropic.backup", "sim-ok", protocol="anthropic"),
            extra=state,
        )
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            serve(tmp_path / "a", toml, "--port", "0") as gw_a,
            serve(tmp_path / "b", toml, "--port", "0") as gw_b,
            aiohttp.ClientSession() as session,
        ):
            url_a = (await gw_a.line(_LISTENING)).group(1)
            url_b = (await gw_b.line(_LISTENING)).group(1)
            first = await ask(session, url_a)
            await until_status(session, url_b, cooling("openai.primary"))
            second = await ask(session, url_b)
            third = await ask(session, url_a)
    assert first == (200, "anthropic.backup")
    assert second == (200, "anthropic.backup")
    assert third == (200, "anthropic.backup")
    hits = [e.model for e in sim.log if e.model == "sim-429-ra30"]
    assert hits == ["sim-429-ra30"]  # the other process never asked the rate-limited profile
