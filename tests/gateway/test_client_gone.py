"""A client that goes away before the gateway writes its answer: its leaving (499), never a failed request (500)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import aiohttp
import pytest
from gateway_support import GATEWAY_KEY
from test_gateway_limits import Upstream, config, served

from turnout.core.types import ChatRequest, ChatResponse, Final, StreamEvent, TextDelta, Usage
from turnout.gateway import GatewayServer


class ClientGone(Upstream):
    """An upstream that answers the moment the client's connection closes, before the gateway hears of it.

    It closes the gateway's side of the client's connection itself, then answers in the same step of the loop: the
    gateway's handler goes on to write its answer before the connection's loss (which cancels it) is delivered.
    That is the race of a client hanging up as its answer comes, made exact.
    """

    def __init__(self) -> None:
        super().__init__()
        self.server: GatewayServer | None = None

    def hang_up(self) -> None:
        assert self.server is not None
        (connection,) = self.server.guard._conns
        assert connection.transport is not None
        connection.transport.abort()

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.arrived += 1
        await asyncio.sleep(0)
        self.hang_up()
        return ChatResponse(text="late", model=model, usage=Usage(input_tokens=10, output_tokens=10))

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.arrived += 1
        await asyncio.sleep(0)
        self.hang_up()
        yield TextDelta(text="late")
        yield Final()


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_gone_before_its_answer_is_written_is_a_499_not_a_failed_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    """Writing the answer's headers finds the connection closed: the access log shows 499 by the client, and nothing
    is logged as an error (no "failed request answered 500").
    """
    upstream = ClientGone()
    caplog.set_level(logging.INFO)
    async with served(config(tmp_path / "l.sqlite3", limit=100.0), upstream) as server:
        upstream.server = server
        async with aiohttp.ClientSession() as session:
            body = {
                "model": "gpt-4.1",
                "max_tokens": 10,
                "stream": stream,
                "messages": [{"role": "user", "content": "hi"}],
            }
            headers = {"Authorization": f"Bearer {GATEWAY_KEY}"}
            with pytest.raises(aiohttp.ClientError):
                await session.post(server.url + "/v1/chat/completions", json=body, headers=headers)
        for _ in range(500):
            if not server.gateway.in_flight:
                break
            await asyncio.sleep(0.01)
        assert not server.gateway.in_flight
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    access = [r.getMessage() for r in caplog.records if r.name == "turnout.gateway.access"]
    assert len(access) == 1 and '"status":499' in access[0] and '"closed_by":"client"' in access[0], access
