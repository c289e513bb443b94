"""Abandoned calls are billed: a stream the consumer leaves, a cut stream, a call given up before its answer."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fakes import err
from turnout import Client, Environment
from turnout.cli.main import app
from turnout.core.errors import StreamInterruptedAfterOutput
from turnout.core.estimate import unseen_usage
from turnout.core.provider import Provider
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Message,
    NativeRequest,
    StreamEvent,
    TextDelta,
    Usage,
    UsageEvent,
)
from turnout.ledger.writer import summarize

PROMPT = "y" * 400  # 100 tokens by the estimate, plus 4 for the message


class Endless(Provider):
    """Streams ``lead`` events first, then ``tok `` for ever; a whole call never answers."""

    def __init__(self, lead: Sequence[StreamEvent] = (), fail_after: int | None = None) -> None:
        self.lead = list(lead)
        self.fail_after = fail_after
        self.started = asyncio.Event()

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.started.set()
        await asyncio.Event().wait()  # the caller gives up first
        raise AssertionError("unreachable")

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        for event in self.lead:
            yield event
        n = 0
        while True:
            n += 1
            if self.fail_after is not None and n > self.fail_after:
                raise err(None, "connection reset")  # what an adapter makes of a cut stream
            yield TextDelta(text="tok ")  # 4 characters: one token by the estimate
            await asyncio.sleep(0)

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(streaming=True)


async def drain(stream: Any) -> None:
    """Read a whole stream."""
    async with stream:
        async for _ in stream:
            pass


def client(tmp_path: Path, upstream: Provider, *, max_tokens: str = "") -> Client:
    toml = (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{tmp_path / "l.sqlite3"}"\n'
        "[reliability]\nprovider_retries = 0\n"
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        f"pricing = {{ input = 1.0, output = 1.0 }}\n{max_tokens}"
    )
    return Client.from_toml(toml, adapter_builder=lambda *_: upstream)


def attempts(tmp_path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(tmp_path / "l.sqlite3")
    try:
        return db.execute(
            "SELECT outcome, input_tokens, output_tokens, usage_note, cost_usd FROM attempts ORDER BY id"
        ).fetchall()
    finally:
        db.close()


async def test_a_stream_the_consumer_leaves_is_billed_for_what_it_delivered(tmp_path: Path) -> None:
    """Reading 20 events then closing records the attempt cancelled, with the input and the 20 tokens delivered
    estimated and priced; ``turnout ledger``'s summary counts it as estimated.
    """
    async with client(tmp_path, Endless()) as c:
        stream = c.stream(PROMPT)
        async with stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 20:
                    break
    [(outcome, tin, tout, note, cost)] = attempts(tmp_path)
    assert (outcome, note) == ("cancelled", "estimated")
    assert tin == 104 and 20 <= tout <= 22
    assert cost == pytest.approx((tin + tout) / 1e6)
    summary = summarize(tmp_path / "l.sqlite3")
    assert summary.usage_notes == {"estimated": (1, pytest.approx(cost))}
    shown = CliRunner().invoke(app, ["ledger", "--path", str(tmp_path / "l.sqlite3")])
    assert shown.exit_code == 0, shown.output
    assert f"estimated=1 (${cost:.6f})" in shown.output


async def test_a_partial_usage_from_the_provider_gives_the_input_and_the_delivered_text_the_output(
    tmp_path: Path,
) -> None:
    """A usage sent before the text (Anthropic's message_start: the input and 1 output token) is kept for the input;
    the output delivered beyond it is estimated.
    """
    lead = [UsageEvent(usage=Usage(input_tokens=900, output_tokens=1))]
    async with client(tmp_path, Endless(lead)) as c:
        stream = c.stream(PROMPT)
        async with stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 30:
                    break
    [(outcome, tin, tout, note, _)] = attempts(tmp_path)
    assert (outcome, tin, note) == ("cancelled", 900, "estimated") and tout >= 30


async def test_a_stream_cut_after_output_is_billed_for_what_it_delivered(tmp_path: Path) -> None:
    """A stream cut by the upstream after 50 tokens records stream_interrupted with the delivered text estimated."""
    async with client(tmp_path, Endless(fail_after=50)) as c:
        with pytest.raises(StreamInterruptedAfterOutput):
            await drain(c.stream(PROMPT))
    [(outcome, tin, tout, note, cost)] = attempts(tmp_path)
    assert (outcome, tin, tout, note) == ("stream_interrupted", 104, 50, "estimated")
    assert cost == pytest.approx(154 / 1e6)


async def test_a_whole_call_given_up_whose_upstream_never_ends_is_billed_its_worst_case_at_close(
    tmp_path: Path,
) -> None:
    """A non-streaming call the caller times out on, whose upstream never answers, is cut when the client closes
    (after ``abandoned_wait_s``) and records its input estimate and its max_tokens, priced; no task is left.
    """
    upstream = Endless()
    async with client(tmp_path, upstream, max_tokens="max_tokens = 500\n") as c:
        c.abandoned_wait_s = 0.0
        task = asyncio.create_task(c.chat(PROMPT))
        await upstream.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    [(outcome, tin, tout, note, cost)] = attempts(tmp_path)
    assert (outcome, tin, tout, note) == ("cancelled", 104, 500, "estimated")
    assert cost == pytest.approx(604 / 1e6)
    assert asyncio.all_tasks() == {asyncio.current_task()}


class Gated(Provider):
    """A whole call that answers with ``usage`` once its gate opens (or fails, with ``fail``); counts its calls."""

    def __init__(self, usage: Usage, fail: bool = False) -> None:
        self.usage = usage
        self.fail = fail
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.calls = 0

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.calls += 1
        self.started.set()
        await self.gate.wait()
        if self.fail:
            raise err(503, "overloaded")
        return ChatResponse(text="done", model=model, usage=self.usage)

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        never: list[StreamEvent] = []  # only whole calls are made of it
        for event in never:
            yield event

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(streaming=True)


def calls(tmp_path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(tmp_path / "l.sqlite3")
    try:
        return db.execute("SELECT outcome FROM calls").fetchall()
    finally:
        db.close()


async def test_a_whole_call_given_up_is_billed_the_provider_s_usage_once_its_upstream_answers(tmp_path: Path) -> None:
    """A caller that times out on a non-streaming call gets its CancelledError at once; the upstream try goes on,
    and when it answers the call is recorded cancelled with the provider's usage (not the worst case), priced.
    """
    upstream = Gated(Usage(input_tokens=900, output_tokens=37))
    async with client(tmp_path, upstream, max_tokens="max_tokens = 500\n") as c:
        task = asyncio.create_task(c.chat(PROMPT))
        await upstream.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        upstream.gate.set()  # the provider answers after the caller left
    assert calls(tmp_path) == [("cancelled",)]
    [(outcome, tin, tout, note, cost)] = attempts(tmp_path)
    assert (outcome, tin, tout, note) == ("ok", 900, 37, None)
    assert cost == pytest.approx(937 / 1e6)


async def test_a_call_given_up_starts_no_other_try(tmp_path: Path) -> None:
    """After the caller gave up, a retryable failure of the try under way is recorded and no retry follows."""
    upstream = Gated(Usage(), fail=True)
    toml = (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{tmp_path / "l.sqlite3"}"\n'
        "[reliability]\nprovider_retries = 3\n"
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )
    async with Client.from_toml(
        toml, adapter_builder=lambda *_: upstream, env=Environment(sleep=lambda _: asyncio.sleep(0))
    ) as c:
        task = asyncio.create_task(c.chat(PROMPT))
        await upstream.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        upstream.gate.set()
    assert upstream.calls == 1
    assert calls(tmp_path) == [("cancelled",)]
    assert [row[0] for row in attempts(tmp_path)] == ["retryable"]


def test_a_cut_call_s_worst_case_counts_every_choice_it_asked_for() -> None:
    """The worst case of a cut call asking for n = 3 answers (OpenAI Chat, passed through) is three output bounds."""
    body = {"model": "m", "n": 3, "messages": [{"role": "user", "content": PROMPT}]}
    request = ChatRequest(
        messages=(Message(role="user", content=PROMPT),),
        max_tokens=500,
        native=NativeRequest(protocol="openai-chat", body=body, only=("n",)),
    )
    assert unseen_usage(request) == Usage(input_tokens=104, output_tokens=1500, estimated=True)
    assert unseen_usage(ChatRequest(messages=request.messages, max_tokens=500)).output_tokens == 500
