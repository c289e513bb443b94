"""Fixtures for the simulator tests.

A started simulator with a fake clock and an instant sleep, and a raw aiohttp client that decodes
SSE and NDJSON bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict

from turnout.sim import Simulator


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Sleeps:
    """An awaitable sleep that returns at once and remembers what it was asked for."""

    calls: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        await asyncio.sleep(0)


@dataclass
class Event:
    """One SSE event."""

    event: str | None
    data: str

    def json(self) -> Any:
        return orjson.loads(self.data)


@dataclass
class Reply:
    """A whole HTTP response."""

    status: int
    headers: CIMultiDict[str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    def events(self) -> list[Event]:
        """The body as SSE events (LF or CRLF framing, comments skipped)."""
        text = self.body.decode().replace("\r\n", "\n")
        events = []
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            name = None
            data = []
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                key, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            events.append(Event(name, "\n".join(data)))
        return events

    def data(self) -> list[Any]:
        """Every SSE data payload decoded as JSON (``[DONE]`` kept as the string)."""
        return [e.data if e.data == "[DONE]" else e.json() for e in self.events()]

    def lines(self) -> list[Any]:
        """The body as NDJSON."""
        return [orjson.loads(line) for line in self.body.splitlines() if line.strip()]


class Wire:
    """A raw HTTP client for the simulator."""

    def __init__(self, sim: Simulator, session: aiohttp.ClientSession) -> None:
        self.sim = sim
        self.session = session

    async def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Reply:
        """POST JSON (or raw bytes) and read the whole response."""
        kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
        async with self.session.post(self.sim.url + path, headers=headers or {}, **kwargs) as resp:
            return Reply(resp.status, CIMultiDict(resp.headers), await resp.read())

    async def get(self, path: str) -> Reply:
        """GET and read the whole response."""
        async with self.session.get(self.sim.url + path) as resp:
            return Reply(resp.status, CIMultiDict(resp.headers), await resp.read())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def sim(clock: FakeClock, sleeps: Sleeps) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock, sleep=sleeps) as simulator:
        yield simulator


@pytest.fixture
async def wire(sim: Simulator) -> AsyncIterator[Wire]:
    async with aiohttp.ClientSession() as session:
        yield Wire(sim, session)
