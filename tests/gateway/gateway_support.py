"""Helpers for the gateway tests: configs over simulator upstreams, a running gateway, raw HTTP and SSE."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from fakes import FakeClock, Fleet
from turnout import Client, Environment
from turnout.core.attribution import Attempt
from turnout.gateway import Gateway, GatewayServer
from turnout.sim import Simulator


@dataclass(frozen=True, kw_only=True)
class Ended:
    """A finished request as the metrics and the recent attempts read it (what the gateway's exchange holds)."""

    surface: str = "openai"
    status: int = 200
    seconds: float = 0.0
    attempts: tuple[Attempt, ...] | None = None
    fallback: tuple[str, str] | None = None
    ended: float = 0.0


GATEWAY_KEY = "gw-test-key-1"
MESSAGES: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
SIM_TEXT = "Hello from the Turnout simulator."
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

#: Two profiles over fake adapters: anthropic.prod (a pool of two keys) falls back to openai.backup, which
#: ``hint:cheap`` also reaches; no ledger, one retry.
TWO_PROFILES = f"""
default_provider = "anthropic.prod"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 1
[providers.models.anthropic.prod]
api_keys = ["sk-ant-POOL-1", "sk-ant-POOL-2"]
model = "claude-sonnet-4-5"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED"
model = "gpt-4.1"
[[model_routes]]
hint = "cheap"
model_provider = "openai.backup"
model = "gpt-4.1"
"""

#: How each upstream protocol is configured: (family, sim base url protocol, extra profile lines).
PROTOCOLS: dict[str, tuple[str, str, str]] = {
    "openai": ("openai", "openai", ""),
    "responses": ("openai", "responses", 'wire_api = "responses"\n'),
    "anthropic": ("anthropic", "anthropic", ""),
    "gemini": ("gemini", "gemini", ""),
    "ollama": ("ollama", "ollama", ""),
}


async def instant(seconds: float) -> None:
    """A sleep that returns at once (backoffs and simulator pacing in tests)."""
    await asyncio.sleep(0)


def profile(sim: Simulator, name: str, model: str, *, protocol: str = "openai", extra: str = "") -> str:
    """A ``[providers.models.<name>]`` table talking to the simulator over ``protocol``."""
    _, base, lines = PROTOCOLS[protocol]
    return (
        f"[providers.models.{name}]\n"
        f'uri = "{sim.base_url(base)}"\n'  # type: ignore[arg-type]
        f'api_key = "sk-up-{name}"\n'
        f'model = "{model}"\n'
        f"{lines}{extra}\n"
    )


def config(default: str, *profiles: str, keys: bool = True, extra: str = "") -> str:
    """A whole config: the default profile, client keys, no ledger, then the profiles."""
    head = f'default_provider = "{default}"\n'
    head += "[ledger]\nenabled = false\n"
    head += "[reliability]\nprovider_retries = 1\n"
    if keys:
        head += f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
    return head + extra + "".join(profiles)


@asynccontextmanager
async def gateway(toml: str, **client_options: Any) -> AsyncIterator[GatewayServer]:
    """A gateway on a free loopback port over a client built from ``toml`` (instant backoff sleeps)."""
    client_options.setdefault("env", Environment(sleep=instant))
    client = Client.from_toml(toml, surface="gateway", ledger=False, **client_options)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


@asynccontextmanager
async def fake_gateway(
    toml: str, fleet: Fleet, **client_options: Any
) -> AsyncIterator[tuple[GatewayServer, FakeClock]]:
    """A gateway over fake adapters (``fleet``) and a fake clock whose sleeps take no time (ledger off by default)."""
    clock = FakeClock()
    client_options.setdefault("ledger", False)
    client = Client.from_toml(toml, adapter_builder=fleet, env=clock.env, surface="gateway", **client_options)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server, clock


@dataclass
class Raw:
    """A whole HTTP response."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    def events(self) -> list[tuple[str | None, str]]:
        """The body as SSE ``(event, data)`` pairs."""
        out = []
        for block in self.body.decode().split("\n\n"):
            if not block.strip():
                continue
            name, data = None, []
            for line in block.split("\n"):
                key, _, value = line.partition(": ")
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            out.append((name, "\n".join(data)))
        return out


async def post(
    server: GatewayServer, path: str, body: Any, *, key: str | None = GATEWAY_KEY, headers: dict[str, str] | None = None
) -> Raw:
    """POST JSON (or raw bytes) to the gateway with the client key and read the whole response."""
    hdrs = dict(headers or {})
    if key is not None:
        hdrs.setdefault("Authorization", f"Bearer {key}")
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url + path, data=data, headers={"Content-Type": "application/json", **hdrs}) as resp,
    ):
        return Raw(resp.status, resp.headers, await resp.read())


async def get(server: GatewayServer, path: str, *, key: str | None = GATEWAY_KEY) -> Raw:
    """GET with the client key."""
    hdrs = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with aiohttp.ClientSession() as session, session.get(server.url + path, headers=hdrs) as resp:
        return Raw(resp.status, resp.headers, await resp.read())


def decode_header(value: str) -> str:
    """Undo the gateway's RFC 8187 encoding of a non-ASCII header value."""
    return unquote(value[len("UTF-8''") :]) if value.startswith("UTF-8''") else value


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one Prometheus sample of a ``/metrics`` text with these labels (None when absent)."""
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] == name and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None
