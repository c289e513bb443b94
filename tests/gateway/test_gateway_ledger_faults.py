"""A nonsense usage from an upstream never costs the client its paid answer, nor the ledger its later records."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from gateway_support import GATEWAY_KEY, post

from servers import loopback_app
from turnout import Client
from turnout.gateway import Gateway, GatewayServer
from turnout.ledger.pricing import default_catalogue

CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def upstream(usage: dict[str, Any]) -> AsyncIterator[str]:
    """A loopback Chat Completions upstream answering every call with ``usage``; yields its base URL."""

    async def chat(request: web.Request) -> web.Response:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "paid"}, "finish_reason": "stop"}],
            "usage": usage,
        }
        # orjson refuses integers beyond 64 bits: write the number's digits into the text as a provider would
        text = orjson.dumps(body).decode().replace('"__HUGE__"', str(2**64 - 1))
        return web.Response(text=text, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with loopback_app(app) as url:
        yield url + "/v1"


def toml(url: str, ledger: Path, *, limit: float | None = None) -> str:
    keys = f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
    if limit is not None:
        keys = f'[gateway.keys.team]\nkey = "{GATEWAY_KEY}"\ndaily_limit_usd = {limit}\n'
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f"{keys}"
        "[providers.models.openai.main]\n"
        f'uri = "{url}"\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


def attempts(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT input_tokens, output_tokens, usage_note FROM attempts ORDER BY id").fetchall()
    finally:
        db.close()


NONSENSE = {
    "2**64-1": {"prompt_tokens": "__HUGE__", "completion_tokens": 5},
    "1e300": {"prompt_tokens": 1e300, "completion_tokens": 5},
    "negative": {"prompt_tokens": -3, "completion_tokens": 5},
    "text": {"prompt_tokens": "12", "completion_tokens": 5},
}
#: The ledger's note of each: an absurd count is bounded (clamped), a garbage one is replaced by the estimate.
NOTES = {"2**64-1": "clamped", "1e300": "clamped", "negative": "estimated", "text": "estimated"}
#: What the catalogue says gpt-4.1's context window is: an input count beyond it is bounded there.
WINDOW = default_catalogue().context_window("openai", "gpt-4.1")


@pytest.mark.parametrize("name", NONSENSE)
async def test_a_nonsense_usage_through_the_gateway_is_clamped_and_every_call_recorded(
    tmp_path: Path, name: str
) -> None:
    """An upstream usage outside 0..2**53 (or not a whole number) answers 200, is clamped (or estimated) and
    marked, and the ledger keeps recording: every call of the run is in the file.
    """
    usage = NONSENSE[name]
    path = tmp_path / "ledger.sqlite3"
    async with upstream(usage) as url:
        client = Client.from_toml(toml(url, path), surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            statuses = [(await post(server, "/v1/chat/completions", CHAT)).status for _ in range(3)]
            health = client.ledger.health if client.ledger is not None else None
    assert statuses == [200, 200, 200]
    assert health is not None and health.ok
    rows = attempts(path)
    assert len(rows) == 3
    for input_tokens, output_tokens, note in rows:
        assert 0 < input_tokens <= 2**53 and output_tokens == 5 and note == NOTES[name]


@pytest.mark.parametrize("usage", [NONSENSE["2**64-1"], NONSENSE["1e300"]], ids=["2**64-1", "1e300"])
async def test_a_clamped_usage_counts_toward_a_limited_key(tmp_path: Path, usage: dict[str, Any]) -> None:
    """A limited key's paid call with an out-of-range usage answers 200, is recorded at the model's context window
    (what the request could have used at most), and its cost counts: the next call is refused by the limit.
    """
    assert WINDOW is not None
    path = tmp_path / "ledger.sqlite3"
    async with upstream(usage) as url:
        client = Client.from_toml(toml(url, path, limit=WINDOW / 1e6 * 0.9), surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            first = await post(server, "/v1/chat/completions", CHAT)
            second = await post(server, "/v1/chat/completions", CHAT)
    assert first.status == 200
    assert second.status == 429 and second.json()["error"]["code"] == "daily_limit_exceeded"
    assert attempts(path) == [(WINDOW, 5, "clamped")]


@pytest.mark.parametrize("name", NONSENSE)
async def test_a_nonsense_usage_through_the_library_is_clamped_and_recorded(tmp_path: Path, name: str) -> None:
    """``client.chat`` over an upstream reporting a nonsense usage returns the answer, marked clamped, and records
    the attempt bounded (clamped) or estimated.
    """
    usage = NONSENSE[name]
    path = tmp_path / "ledger.sqlite3"
    async with upstream(usage) as url, Client.from_toml(toml(url, path)) as client:
        replies = [await client.chat("hi") for _ in range(2)]
    for reply in replies:
        assert reply.text == "paid"
        assert reply.usage is not None and reply.usage.clamped
        assert 0 <= reply.usage.input_tokens <= 2**53
    assert [note for _, _, note in attempts(path)] == [NOTES[name], NOTES[name]]
