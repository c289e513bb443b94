"""The contenders, each used the way its users use it, against the same upstream.

Every contender has ``chat()`` (one non-streaming call; returns the answer text) and ``stream()`` (one
100-chunk streaming call, consumed to the end; returns the text), and ``aclose()``. They all keep a warm
connection pool to the upstream, as a long-lived application would.

* :class:`Raw`: aiohttp POST + orjson, with a minimal SSE parser: the floor.
* :class:`TurnoutClient`: ``Client.from_dict`` with a primary profile and one fallback profile, ``[reliability]``
  defaults, through the public ``chat``/``stream`` API only.
* :class:`OpenAISDK`: ``openai.AsyncOpenAI`` (default settings).
* :class:`LiteLLMRouter`: ``litellm.Router`` with a primary and one fallback deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.upstream import REPLY_TEXT, STREAM_TEXT

MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello to the benchmark, briefly."},
]
PRIMARY_MODEL = "gpt-4.1-mini"
BACKUP_MODEL = "gpt-4.1-nano"
API_KEY = "sk-bench-0000"


def turnout_config(
    url: str,
    *,
    primary_prefix: str = "",
    ledger_path: Path | None = None,
    breaker: bool = True,
    hedge_after_ms: float | None = None,
) -> dict[str, Any]:
    """A ``turnout.toml``-shaped mapping: ``openai.primary`` with one fallback profile, ``openai.backup``.

    ``primary_prefix`` selects an upstream behaviour for the primary only (``/rl-ra0``: always 429).
    ``breaker=False`` sets ``[reliability.breaker] enabled = false``; ``hedge_after_ms`` turns hedging on after
    that many milliseconds (``[reliability.hedge]``).
    """
    config: dict[str, Any] = {
        "default_provider": "openai.primary",
        "providers": {
            "models": {
                "openai": {
                    "primary": {
                        "uri": f"{url}{primary_prefix}/v1",
                        "api_key": API_KEY,
                        "model": PRIMARY_MODEL,
                        "fallback": ["openai.backup"],
                    },
                    "backup": {"uri": f"{url}/v1", "api_key": API_KEY, "model": BACKUP_MODEL},
                }
            }
        },
        "ledger": {"enabled": ledger_path is not None},
    }
    if ledger_path is not None:
        config["ledger"]["path"] = str(ledger_path)
    if not breaker:
        config["reliability"] = {"breaker": {"enabled": False}}
    if hedge_after_ms is not None:
        config.setdefault("reliability", {})["hedge"] = {"enabled": True, "after_ms": hedge_after_ms}
    return config


class Raw:
    """The floor: one aiohttp session, an orjson-encoded body, orjson decoding, a minimal SSE parser."""

    name = "raw aiohttp"

    def __init__(self, url: str, *, prefix: str = "", limit: int = 100) -> None:
        self.url = f"{url}{prefix}/v1/chat/completions"
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit),
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        )

    async def chat(self) -> str:
        body = orjson.dumps({"model": PRIMARY_MODEL, "messages": MESSAGES})
        async with self.session.post(self.url, data=body) as resp:
            data = orjson.loads(await resp.read())
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}")
        text: str = data["choices"][0]["message"]["content"]
        return text

    async def stream(self) -> str:
        body = orjson.dumps(
            {"model": PRIMARY_MODEL, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        )
        parts: list[str] = []
        async with self.session.post(self.url, data=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}")
            buf = b""
            async for chunk in resp.content.iter_any():
                buf = buf + chunk if buf else chunk
                pos = 0
                while (end := buf.find(b"\n\n", pos)) >= 0:
                    for line in buf[pos:end].split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            return "".join(parts)
                        obj = orjson.loads(data)
                        for choice in obj["choices"]:
                            content = choice["delta"].get("content")
                            if content:
                                parts.append(content)
                    pos = end + 2
                buf = buf[pos:]
        raise RuntimeError("the stream ended without [DONE]")

    async def aclose(self) -> None:
        await self.session.close()


class TurnoutClient:
    """Turnout's public ``Client`` (``ledger=False`` unless a ledger path is given)."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "turnout",
        primary_prefix: str = "",
        ledger_path: Path | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        from turnout import Client

        self.name = name
        if config is None:
            config = turnout_config(url, primary_prefix=primary_prefix, ledger_path=ledger_path)
        self.client = Client.from_dict(config, ledger=ledger_path is not None)

    async def chat(self) -> str:
        reply = await self.client.chat(MESSAGES)
        return reply.text

    async def stream(self) -> str:
        parts: list[str] = []
        stream = self.client.stream(MESSAGES)
        async for event in stream:
            if event.type == "text":
                parts.append(event.text)
        stream.response  # noqa: B018 - the accepted Reply, as a caller reads it after the loop
        return "".join(parts)

    async def aclose(self) -> None:
        await self.client.aclose()


class OpenAISDK:
    """The official ``openai`` SDK (``AsyncOpenAI``, default retries and timeouts)."""

    name = "openai SDK"

    def __init__(self, url: str) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=API_KEY)

    async def chat(self) -> str:
        resp = await self.client.chat.completions.create(model=PRIMARY_MODEL, messages=MESSAGES)  # type: ignore[arg-type]
        return resp.choices[0].message.content or ""

    async def stream(self) -> str:
        parts: list[str] = []
        stream = await self.client.chat.completions.create(  # type: ignore[call-overload]
            model=PRIMARY_MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)

    async def aclose(self) -> None:
        await self.client.close()


class LiteLLMRouter:
    """LiteLLM's ``Router`` with a primary deployment and one fallback (default settings otherwise)."""

    name = "litellm Router"

    def __init__(self, url: str) -> None:
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True

        def deployment(name: str, model: str) -> dict[str, Any]:
            return {
                "model_name": name,
                "litellm_params": {"model": f"openai/{model}", "api_base": f"{url}/v1", "api_key": API_KEY},
            }

        self.router = litellm.Router(  # type: ignore[attr-defined]
            model_list=[deployment("primary", PRIMARY_MODEL), deployment("backup", BACKUP_MODEL)],
            fallbacks=[{"primary": ["backup"]}],
        )

    async def chat(self) -> str:
        resp: Any = await self.router.acompletion(model="primary", messages=MESSAGES)
        return str(resp.choices[0].message.content)

    async def stream(self) -> str:
        parts: list[str] = []
        resp: Any = await self.router.acompletion(
            model="primary", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in resp:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)

    async def aclose(self) -> None:
        # The Router keeps its clients in a cache with no public close; they go with the process.
        return None


EXPECTED_CHAT = REPLY_TEXT
EXPECTED_STREAM = STREAM_TEXT
