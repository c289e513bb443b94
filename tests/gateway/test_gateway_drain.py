"""A bounded, clean shutdown: after drain_secs each open stream ends with its error event and a whole body."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, config, gateway, profile

from turnout.config import load_config_toml
from turnout.core.errors import ConfigError
from turnout.gateway import GatewayServer
from turnout.sim import Simulator

DRAIN = '[gateway]\napi_keys = ["{key}"]\ndrain_secs = 0.3\n'
STREAMS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "chat": ("/v1/chat/completions", {"model": "", "messages": MESSAGES, "stream": True}, {}),
    "responses": ("/v1/responses", {"model": "", "input": "hi", "stream": True}, {}),
    "anthropic": (
        "/v1/messages",
        {"model": "", "max_tokens": 50, "messages": MESSAGES, "stream": True},
        {"anthropic-version": "2023-06-01"},
    ),
}


def _toml(sim: Simulator) -> str:
    return config(
        "openai.main", profile(sim, "openai.main", "sim-stall-a3"), keys=False, extra=DRAIN.format(key=GATEWAY_KEY)
    )


async def _open(session: aiohttp.ClientSession, server: GatewayServer, name: str) -> aiohttp.ClientResponse:
    path, body, extra = STREAMS[name]
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json", **extra}
    resp = await session.post(server.url + path, data=orjson.dumps(body), headers=headers)
    await resp.content.readuntil(b"\n\n")  # its first event: the stream is open and stalled upstream
    return resp


async def test_streams_still_open_when_drain_secs_pass_end_with_their_error_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Chat gets a data: error chunk, Anthropic event: error, Responses response.failed; each body ends cleanly."""
    caplog.set_level(logging.INFO, logger="turnout.gateway.access")
    async with Simulator() as sim, gateway(_toml(sim)) as server, aiohttp.ClientSession() as session:
        opened = {name: await _open(session, server, name) for name in STREAMS}
        t0 = time.monotonic()
        finished = await server.stop()
        took = time.monotonic() - t0
        rest = {name: (await resp.read()).decode() for name, resp in opened.items()}  # raises on a bare close
    assert finished is False
    assert took < 0.3 + 2.0
    chat = [line for line in rest["chat"].split("\n\n") if line.startswith("data: ")]
    assert orjson.loads(chat[-1].removeprefix("data: "))["error"]["code"] == "shutting_down"
    assert "[DONE]" not in rest["chat"]
    assert "event: error" in rest["anthropic"] and "overloaded_error" in rest["anthropic"]
    assert "message_stop" not in rest["anthropic"]
    assert "event: response.failed" in rest["responses"] and "response.completed" not in rest["responses"]
    lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "turnout.gateway.access"]
    cut = [(line["status"], line["closed_by"], line["interrupted"]) for line in lines if line["stream"]]
    assert cut == [(200, "server", True)] * 3  # not 499: the server ended them, the client did not leave


async def test_a_request_that_sent_nothing_yet_gets_503_shutting_down() -> None:
    """A call still waiting for its upstream when the drain ends is answered 503 shutting_down, not dropped."""
    async with Simulator() as sim:
        toml = config(
            "openai.main", profile(sim, "openai.main", "sim-silence"), keys=False, extra=DRAIN.format(key=GATEWAY_KEY)
        )
        async with gateway(toml) as server, aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
            body = orjson.dumps({"model": "", "messages": MESSAGES})
            call = asyncio.ensure_future(session.post(server.url + "/v1/chat/completions", data=body, headers=headers))
            await sim.wait_for_log(1, settled=False)
            await server.stop()
            resp = await call
            answer = await resp.json()
    assert resp.status == 503
    assert answer["error"]["code"] == "shutting_down"


@pytest.mark.parametrize("value", ["0", "-1", "7200"])
def test_drain_secs_out_of_range_fails_with_its_key_path(value: str) -> None:
    """drain_secs must be more than 0 and at most an hour."""
    with pytest.raises(ConfigError) as caught:
        load_config_toml(
            f'[gateway]\ndrain_secs = {value}\n[providers.models.openai.main]\napi_key = "k"\nmodel = "m"\n'
        )
    assert caught.value.path == "gateway.drain_secs"
