"""Helpers for adapter tests: fixture replay, byte splitting, and a loopback server that records requests."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from turnout.config import load_config_dict
from turnout.core.errors import TurnoutError
from turnout.core.types import Final, StreamEvent
from turnout.providers import HttpClient, build_adapter
from turnout.providers.base import HTTPAdapter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_path(rel: str) -> Path:
    """Absolute path of a recorded fixture, e.g. ``openai/chat_stream_refusal.sse``."""
    return FIXTURES / rel


def sse_from_chunks_file(rel: str, *, done: bool = False, events: bool = False) -> bytes:
    """A vercel ``*.chunks.txt``-style fixture (one data payload per line) as SSE wire bytes.

    ``events=True`` adds the ``event: <type>`` line real Anthropic/Responses streams carry;
    ``done=True`` appends ``data: [DONE]`` as OpenAI-style vendors send.
    """
    out = bytearray()
    for line in fixture_path(rel).read_bytes().splitlines():
        if not line.strip():
            continue
        if events:
            kind = orjson.loads(line).get("type")
            if kind:
                out += b"event: " + kind.encode() + b"\n"
        out += b"data: " + line + b"\n\n"
    if done:
        out += b"data: [DONE]\n\n"
    return bytes(out)


def two_way_splits(data: bytes, *, max_points: int = 4000) -> Iterator[list[bytes]]:
    """``[data[:i], data[i:]]`` for every split point (evenly thinned above ``max_points``)."""
    n = len(data)
    step = max(1, n // max_points)
    for i in range(0, n + 1, step):
        yield [data[:i], data[i:]]


def random_splits(data: bytes, *, runs: int = 50, seed: int = 7) -> Iterator[list[bytes]]:
    """Random multi-way splits of ``data`` (deterministic)."""
    rng = random.Random(seed)
    for _ in range(runs):
        cuts = sorted(rng.sample(range(1, len(data)), k=min(len(data) - 1, rng.randint(1, 40))))
        pieces, prev = [], 0
        for c in cuts:
            pieces.append(data[prev:c])
            prev = c
        pieces.append(data[prev:])
        yield pieces


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at each position in ``cuts`` (taken modulo ``len(data) + 1``), in order."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(data[prev:p])
        prev = p
    pieces.append(data[prev:])
    return pieces


def ends_in_final_or_turnout_error(decode: Callable[[list[bytes]], Sequence[StreamEvent]], pieces: list[bytes]) -> None:
    """Decoding ``pieces`` either ends with ``Final`` or raises a TurnoutError, never anything else."""
    try:
        events = decode(pieces)
    except TurnoutError:
        return
    assert isinstance(events[-1], Final)


def bytewise(data: bytes) -> list[bytes]:
    """One byte per chunk."""
    return [data[i : i + 1] for i in range(len(data))]


@dataclass
class Reply:
    """What the recording server answers: status, headers and the body as pieces sent with a pause."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    pieces: Sequence[bytes] = (b"{}",)
    pause: float = 0.0


@dataclass
class Recorded:
    """One request the server saw."""

    method: str
    path: str
    raw_path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


class RecordingServer:
    """A loopback aiohttp server answering every POST with the queued :class:`Reply` and recording it."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: list[Reply] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                raw_path=request.raw_path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=orjson.loads(raw) if raw else None,
            )
        )
        reply = self.replies.pop(0) if self.replies else Reply()
        resp = web.StreamResponse(status=reply.status, headers=reply.headers)
        await resp.prepare(request)
        for piece in reply.pieces:
            await resp.write(piece)
            if reply.pause:
                await asyncio.sleep(reply.pause)
        await resp.write_eof()
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def make_adapter(
    http: HttpClient, family: str, uri: str, *, api_key: str | None = "sk-test-key-123", **profile: Any
) -> HTTPAdapter:
    """An adapter for a one-profile config ``family.test`` pointed at ``uri``."""
    fields = {"uri": uri, **profile}
    if api_key is not None:
        fields["api_key"] = api_key
    cfg = load_config_dict({"providers": {"models": {family: {"test": fields}}}}, env={})
    return build_adapter(f"{family}.test", cfg.profiles()[f"{family}.test"], http, api_key)


def decoded(decode: Callable[[list[StreamEvent]], None]) -> tuple[list[StreamEvent], str | None]:
    """The events ``decode`` appends up to its first error, and that error's type (None: the stream completed)."""
    events: list[StreamEvent] = []
    try:
        decode(events)
    except TurnoutError as exc:
        return events, type(exc).__name__
    return events, None
