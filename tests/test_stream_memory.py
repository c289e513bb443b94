"""Every stream's memory is bounded by ``max_response_bytes``, and nothing of a cut stream outlives it.

A loopback upstream floods deltas (OpenAI SSE text, Bedrock event-stream text and tool-input fragments) until it
has sent :data:`CAP` bytes, far past the profile's bound: the stream must end on the bound with the classified
:class:`~turnout.core.errors.ResponseTooLarge`, never read to the upstream's end.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from servers import loopback_app
from turnout import Client
from turnout.core.errors import ErrorClass, ResponseTooLarge, StreamInterruptedAfterOutput
from turnout.core.streams import ResponseBuilder
from turnout.core.types import ReasoningDelta, TextDelta
from turnout.gateway import Gateway, GatewayServer
from turnout.runtime.stream import ReplyStream
from turnout.sim import Simulator
from turnout.sim.aws import event

LIMIT = 64 * 1024
GATEWAY_KEY = "gw-test-key-0000000000"
#: What the flood sends at most before it ends its body (without a completion signal).
CAP = 8 * 1024 * 1024
PIECE = "a" * 4000  # one delta's text: most of each event is text, so the text held tracks the bytes read


class Flood:
    """A loopback upstream whose streams never finish: deltas until :data:`CAP` bytes, then the body ends.

    A text flood sends its first delta alone and floods once :attr:`shown` is set (the caller saw that delta), so
    the bound is passed after output, whatever sizes the client's reads come in.

    Attributes:
        sent: Bytes each stream managed to write, by model.
        requests: Requests received, by model.
        shown: Set by the test when the first delta reached the caller.
    """

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.requests: dict[str, int] = {}
        self.shown = asyncio.Event()

    async def openai(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": body["model"]}
        delta = orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": PIECE}}]})
        unit = b"data: " + delta + b"\n\n"
        return await self._flood(request, body["model"], unit, unit, "text/event-stream")

    async def bedrock(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        model = request.match_info["model"]
        start = event("messageStart", b'{"role":"assistant"}')
        if model.endswith("tool"):
            use = {"start": {"toolUse": {"toolUseId": "t1", "name": "get_weather"}}, "contentBlockIndex": 0}
            start += event("contentBlockStart", orjson.dumps(use))
            frame = event(
                "contentBlockDelta", orjson.dumps({"delta": {"toolUse": {"input": PIECE}}, "contentBlockIndex": 0})
            )
        else:
            frame = event("contentBlockDelta", orjson.dumps({"delta": {"text": PIECE}, "contentBlockIndex": 0}))
            start += frame
        return await self._flood(request, model, start, frame, "application/vnd.amazon.eventstream")

    async def _flood(
        self, request: web.Request, model: str, start: bytes, unit: bytes, content_type: str
    ) -> web.StreamResponse:
        self.requests[model] = self.requests.get(model, 0) + 1
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        sent = 0
        try:
            await response.write(start)
            if not model.endswith("tool"):
                await self.shown.wait()
            batch = unit * 16
            while sent < CAP:
                await response.write(batch)
                sent += len(batch)
            await response.write_eof()
        except (ConnectionError, OSError):
            pass  # the client went away: what it stopped
        self.sent[model] = sent
        return response


@pytest.fixture
async def flood() -> AsyncIterator[tuple[Flood, str]]:
    server = Flood()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.openai)
    app.router.add_post("/model/{model}/converse-stream", server.bedrock)
    async with loopback_app(app) as url:
        yield server, url


def openai(url: str, model: str, limit: int = LIMIT, **extra: Any) -> dict[str, Any]:
    return {"uri": url + "/v1", "api_key": "sk-test-0000", "model": model, "max_response_bytes": limit, **extra}


def bedrock(url: str, model: str, **extra: Any) -> dict[str, Any]:
    return {
        "uri": url,
        "region": "us-east-1",
        "api_key": "bedrock-api-key-0001",
        "model": model,
        "max_response_bytes": LIMIT,
        **extra,
    }


def config(default: str, models: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "default_provider": default,
        "providers": {"models": models},
        "reliability": {"provider_retries": 2, "provider_backoff_ms": 1},
        "ledger": {"enabled": False},
    }


async def read_all(stream: ReplyStream, server: Flood) -> None:
    """Read ``stream`` to its end, telling the flood when the first delta was shown."""
    async with stream:
        async for _ in stream:
            server.shown.set()


async def interrupted_stream(client: Client, server: Flood) -> StreamInterruptedAfterOutput:
    """Stream until the turn fails after output (the flood starts once the first delta was shown); the failure."""
    with pytest.raises(StreamInterruptedAfterOutput) as caught:
        await read_all(client.stream("hi"), server)
    return caught.value


def assert_cut_on_the_bound(exc: StreamInterruptedAfterOutput) -> None:
    assert isinstance(exc.__cause__, ResponseTooLarge), repr(exc.__cause__)
    assert exc.cause_class is ErrorClass.RETRYABLE
    assert 0 < len(exc.partial_text) <= LIMIT
    assert [a.detail for a in exc.attempts] == ["protocol_error"]  # one try: a cut answer is never replayed


async def test_an_openai_sse_flood_ends_on_the_bound_with_a_classified_error(flood: tuple[Flood, str]) -> None:
    """An SSE stream whose decoded total passes max_response_bytes ends with ResponseTooLarge after output."""
    server, url = flood
    async with Client.from_dict(config("openai.flood", {"openai": {"flood": openai(url, "flood")}})) as client:
        assert_cut_on_the_bound(await interrupted_stream(client, server))
    assert server.requests == {"flood": 1}


async def test_a_bedrock_text_flood_ends_on_the_bound_with_a_classified_error(flood: tuple[Flood, str]) -> None:
    """Bedrock event-stream text deltas past max_response_bytes end with ResponseTooLarge after output."""
    server, url = flood
    async with Client.from_dict(config("bedrock.flood", {"bedrock": {"flood": bedrock(url, "flood-text")}})) as client:
        assert_cut_on_the_bound(await interrupted_stream(client, server))
    assert server.requests == {"flood-text": 1}


async def test_a_bedrock_tool_input_flood_moves_on_to_the_next_entry(flood: tuple[Flood, str]) -> None:
    """Tool-input fragments past the bound fail before output: the next entry answers, the flood is not replayed."""
    server, url = flood
    async with Simulator() as sim:
        models = {
            "bedrock": {"flood": bedrock(url, "flood-tool", fallback=["openai.backup"])},
            "openai": {"backup": {"uri": sim.base_url("openai"), "api_key": "sk-test-0000", "model": "gpt-4.1"}},
        }
        async with Client.from_dict(config("bedrock.flood", models)) as client:
            reply = await client.turn("hi")
    assert reply.served.provider == "openai.backup" and reply.text
    assert [(a.provider, a.detail) for a in reply.attempts] == [
        ("bedrock.flood", "protocol_error"),
        ("openai.backup", None),
    ]
    assert server.requests == {"flood-tool": 1}


async def test_a_bedrock_tool_input_flood_alone_fails_with_the_classified_error(flood: tuple[Flood, str]) -> None:
    """With no other entry, a tool-input flood past the bound is ResponseTooLarge: no recovery on its entry."""
    server, url = flood
    async with Client.from_dict(config("bedrock.flood", {"bedrock": {"flood": bedrock(url, "flood-tool")}})) as client:
        with pytest.raises(ResponseTooLarge):
            await client.turn("hi")
    assert server.requests == {"flood-tool": 1}


async def test_nothing_of_a_cut_stream_is_kept_once_the_caller_lets_go(flood: tuple[Flood, str]) -> None:
    """After a cut stream ended and the caller dropped its error, its text is freed while the client stays open."""
    server, url = flood
    limit = 4 * 1024 * 1024
    async with Client.from_dict(config("openai.flood", {"openai": {"flood": openai(url, "flood", limit)}})) as client:
        await interrupted_stream(client, server)  # the first call's one-off work (prices, caches) is done
        server.shown.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            exc = await interrupted_stream(client, server)
            assert len(exc.partial_text) > limit // 2  # the text held was large
            del exc
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert after - before < limit // 8, f"{(after - before) / 1e6:.1f} MB still held"


async def test_a_kept_stream_and_its_error_hold_the_shown_text_once(flood: tuple[Flood, str]) -> None:
    """A caller keeping a cut stream and its error keeps the shown text once, not the stream's pieces beside it."""
    server, url = flood
    limit = 4 * 1024 * 1024
    async with Client.from_dict(config("openai.flood", {"openai": {"flood": openai(url, "flood", limit)}})) as client:
        await interrupted_stream(client, server)  # the first call's one-off work (prices, caches) is done
        server.shown.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            stream = client.stream("hi")
            with pytest.raises(StreamInterruptedAfterOutput) as caught:
                await read_all(stream, server)
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        text = caught.value.partial_text
        assert len(text) > limit // 2 and stream.partial_text == text
        extra = held - before - len(text)
        assert extra < limit // 4, f"{extra / 1e6:.1f} MB held beside the shown text"


def test_a_builder_compacts_many_small_deltas_into_a_few_strings() -> None:
    """Compacting after each read keeps the text and reasoning exact, in a few strings rather than one per delta."""
    builder = ResponseBuilder()
    for n in range(10_000):
        builder.add(TextDelta(text=str(n % 10)))
        builder.add(ReasoningDelta(text="r"))
        if n % 100 == 99:
            builder.compact()
    assert builder.text == "0123456789" * 1000 and builder.reasoning == "r" * 10_000
    assert len(builder.text_parts) < 1_000 and builder.build().text == builder.text


async def test_a_gateway_client_of_a_flood_gets_the_bound_and_an_interruption(
    flood: tuple[Flood, str], tmp_path: Path
) -> None:
    """Through the gateway, a flood is cut on the bound: the client gets about that much, then the interruption."""
    server, url = flood
    text = (
        'default_provider = "openai.flood"\n'
        f'[ledger]\npath = "{tmp_path / "ledger.sqlite3"}"\n'
        f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n'
        f'[providers.models.openai.flood]\nuri = "{url}/v1"\napi_key = "sk-up"\nmodel = "flood"\n'
        f"max_response_bytes = {LIMIT}\n"
    )
    body = {"model": "", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}"}
    async with (
        GatewayServer(Gateway(Client.from_toml(text, surface="gateway"), owns_client=True)) as gateway,
        aiohttp.ClientSession() as session,
        session.post(gateway.url + "/v1/chat/completions", json=body, headers=headers) as resp,
    ):
        got = b""
        async for chunk in resp.content.iter_any():
            server.shown.set()
            got += chunk
    assert resp.status == 200 and len(got) < 2 * LIMIT
    assert b"stream_interrupted" in got[-2000:]
    assert server.requests == {"flood": 1}
