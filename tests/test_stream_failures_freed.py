"""A turn that recovered from a failed stream leaves no reference cycle holding the failure for the collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from fakes import FakeClock, Fleet, Scripted, err
from test_runtime import TWO
from turnout import Client
from turnout.core.errors import ProviderError, RefusalError, StreamInterruptedAfterOutput
from turnout.core.types import ChatRequest, StreamEvent, TextDelta, Usage, UsageEvent


class Failing(Scripted):
    """Every stream sends ``lead`` events, then fails with a new error, raised as an adapter raises it (no local)."""

    def __init__(self, *lead: StreamEvent, status: int = 503, code: str | None = None) -> None:
        super().__init__()
        self.lead = lead
        self.status, self.code = status, code
        self.raised: list[weakref.ref[ProviderError]] = []

    def _error(self) -> ProviderError:
        error = err(self.status, "failed", error_code=self.code)
        self.raised.append(weakref.ref(error))
        return error

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        for event in self.lead:
            yield event
        raise self._error()


def _client(primary: Failing) -> Client:
    fleet = Fleet(anthropic__backup=["from backup"])

    def build(name: str, profile: Any, key: str | None) -> Scripted:
        return primary if name == "openai.primary" else fleet(name, profile, key)

    clock = FakeClock()
    return Client.from_toml(TWO, adapter_builder=build, env=clock.env, ledger=False)


async def _consume(client: Client, shown: list[str]) -> None:
    async for event in client.stream("hi"):
        shown.append(event.type)


@pytest.fixture
def no_collector() -> Any:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.usefixtures("no_collector")
async def test_a_stream_that_failed_to_open_is_freed_once_the_turn_recovered() -> None:
    """Failures of a stream's opening tries are freed by reference counting once the walk recovered the turn."""
    primary = Failing()
    async with _client(primary) as c:
        reply = await c.turn("hi")
        assert reply.text == "from backup"
        assert [a.outcome for a in reply.attempts] == ["retryable", "retryable", "ok"]
        del reply
    assert len(primary.raised) == 2
    assert [r() for r in primary.raised] == [None, None]


@pytest.mark.usefixtures("no_collector")
async def test_a_stream_that_failed_before_output_is_freed_once_the_turn_recovered() -> None:
    """A stream that opened, then failed before any output, is freed by reference counting after the recovery."""
    primary = Failing(UsageEvent(usage=Usage(input_tokens=1, output_tokens=0)))
    async with _client(primary) as c:
        reply = await c.turn("hi")
        assert reply.text == "from backup"
        assert [a.outcome for a in reply.attempts] == ["retryable", "ok"]
        del reply
    assert len(primary.raised) == 1 and primary.raised[0]() is None


@pytest.mark.usefixtures("no_collector")
async def test_a_stream_that_failed_after_output_is_freed_once_the_caller_lets_go() -> None:
    """The failure behind StreamInterruptedAfterOutput is freed by reference counting once the caller drops it."""
    primary = Failing(TextDelta(text="Hel"))
    async with _client(primary) as c:
        shown: list[str] = []
        with pytest.raises(StreamInterruptedAfterOutput) as caught:
            await _consume(c, shown)
        assert shown == ["text"] and isinstance(caught.value.__cause__, ProviderError)
        del caught
    assert len(primary.raised) == 1 and primary.raised[0]() is None


@pytest.mark.usefixtures("no_collector")
async def test_a_stream_the_policy_stopped_is_freed_once_the_caller_lets_go() -> None:
    """A refusal that stopped the walk at the stream's opening is freed by reference counting once dropped."""
    primary = Failing(status=400, code="content_policy_violation")
    async with _client(primary) as c:
        with pytest.raises(RefusalError):
            await c.turn("hi")
    assert len(primary.raised) == 1 and primary.raised[0]() is None
