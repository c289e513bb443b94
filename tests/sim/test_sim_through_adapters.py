"""Every protocol the simulator speaks, ok and every fault, decoded by Turnout's own adapters over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnout.config import load_config_dict
from turnout.core.errors import (
    ErrorClass,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    RefusalError,
    StreamTruncated,
)
from turnout.core.streams import acollect
from turnout.core.types import ChatRequest, ChatResponse, TextDelta
from turnout.providers import HttpClient, build_adapter
from turnout.providers.base import HTTPAdapter
from turnout.sim import Simulator

PROTOCOLS = ["openai", "responses", "anthropic", "gemini", "ollama", "azure"]
REQUEST = ChatRequest.of("say something nice")


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A simulator on a free loopback port."""
    async with Simulator() as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    """One HTTP client for the test."""
    client = HttpClient()
    yield client
    await client.aclose()


def adapter(sim: Simulator, http: HttpClient, protocol: str, model: str) -> HTTPAdapter:
    """A real adapter for ``protocol`` pointed at the simulator."""
    family, fields = {
        "openai": ("openai", {"uri": sim.base_url("openai")}),
        "responses": ("openai", {"uri": sim.base_url("openai"), "wire_api": "responses"}),
        "anthropic": ("anthropic", {"uri": sim.base_url("anthropic")}),
        "gemini": ("gemini", {"uri": sim.base_url("gemini")}),
        "ollama": ("ollama", {"uri": sim.base_url("ollama")}),
        "azure": ("azure", {"uri": sim.base_url("azure", deployment=model)}),
    }[protocol]
    fields = {**fields, "api_key": "sk-sim-test", "first_token_timeout_secs": 5.0, "idle_timeout_secs": 5.0}
    cfg = load_config_dict({"providers": {"models": {family: {"t": fields}}}}, env={})
    return build_adapter(f"{family}.t", cfg.profiles()[f"{family}.t"], http, "sk-sim-test")


async def texts_until_error(a: HTTPAdapter, model: str, seen: list[str]) -> None:
    """Stream ``model``, keeping the text of each delta in ``seen`` until the stream raises."""
    async for event in a.stream(REQUEST, model):
        if isinstance(event, TextDelta):
            seen.append(event.text)


async def both(a: HTTPAdapter, model: str) -> tuple[ChatResponse | BaseException, ChatResponse | BaseException]:
    """The non-streaming and the streaming outcome of one model on one adapter."""
    out: list[ChatResponse | BaseException] = []
    for stream in (False, True):
        try:
            out.append(await (acollect(a.stream(REQUEST, model)) if stream else a.chat(REQUEST, model)))
        except ProviderError as exc:
            out.append(exc)
    return out[0], out[1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ok_answers_agree_streamed_and_not(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """An ok answer with reasoning, text and tool calls decodes the same streamed and not, with exact usage."""
    a = adapter(sim, http, protocol, "sim-ok-t6-r3-tc2")
    whole, streamed = await both(a, "sim-ok-t6-r3-tc2")
    assert isinstance(whole, ChatResponse) and isinstance(streamed, ChatResponse)
    assert whole.text == streamed.text and len(whole.text.split()) == 6
    assert [c.name for c in whole.tool_calls] == [c.name for c in streamed.tool_calls] == ["get_weather"] * 2
    assert [c.parsed_arguments() for c in whole.tool_calls] == [c.parsed_arguments() for c in streamed.tool_calls]
    assert whole.usage == streamed.usage and whole.usage is not None
    logged = [e.usage for e in sim.log if e.usage is not None]
    assert whole.usage.output_tokens == logged[0].output
    assert whole.usage.input_tokens == logged[0].input
    if protocol != "azure":  # Azure chat deployments carry no reasoning field in the simulator's shape
        assert (whole.reasoning or "").split() == (streamed.reasoning or "").split()


ERRORS = {
    # behaviour: (expected class, expected auth failure)
    "sim-429-ra2": (ErrorClass.RATE_LIMITED, False),
    "sim-auth": (ErrorClass.NON_RETRYABLE, True),
    "sim-notfound": (ErrorClass.NON_RETRYABLE, False),
    "sim-context": (ErrorClass.CONTEXT_WINDOW, False),
    "sim-policy": (ErrorClass.REFUSAL, False),
    "sim-500": (ErrorClass.RETRYABLE, False),
    "sim-badgateway": (ErrorClass.RETRYABLE, False),
    "sim-unavailable": (ErrorClass.RETRYABLE, False),
    "sim-overloaded": (ErrorClass.RETRYABLE, False),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", sorted(ERRORS))
async def test_error_statuses_are_classified(sim: Simulator, http: HttpClient, protocol: str, model: str) -> None:
    """Each HTTP error the simulator imitates comes out of the adapter with the right class, both ways."""
    expected, auth = ERRORS[model]
    for outcome in await both(adapter(sim, http, protocol, model), model):
        assert isinstance(outcome, ProviderError), outcome
        assert outcome.error_class is expected, (protocol, model, outcome)
        assert outcome.auth_failure is auth
        if expected is ErrorClass.REFUSAL:
            assert isinstance(outcome, RefusalError)
    if model == "sim-429-ra2":
        assert outcome.retry_after == 2.0


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_quota_exhaustion_is_never_a_plain_retry(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """Billing-level exhaustion is not retried; Gemini's per-day quota id stays a rate limit."""
    expected = {
        "openai": ErrorClass.RATE_LIMITED_NON_RETRYABLE,  # code insufficient_quota
        "responses": ErrorClass.RATE_LIMITED_NON_RETRYABLE,
        "azure": ErrorClass.RATE_LIMITED_NON_RETRYABLE,
        "anthropic": ErrorClass.NON_RETRYABLE,  # a 400 "credit balance is too low"
        "gemini": ErrorClass.RATE_LIMITED,  # a per-day quota id: a rate limit, cooled down, not retried in place
        "ollama": ErrorClass.RATE_LIMITED,  # the simulator's wording carries no billing hint
    }[protocol]
    for outcome in await both(adapter(sim, http, protocol, "sim-quota"), "sim-quota"):
        assert isinstance(outcome, ProviderError)
        assert outcome.error_class is expected


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_reset_before_headers_is_a_connection_error(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """A connection reset before any header is a retryable connection error."""
    for outcome in await both(adapter(sim, http, protocol, "sim-reset"), "sim-reset"):
        assert isinstance(outcome, ProviderConnectionError)
        assert outcome.error_class is ErrorClass.RETRYABLE


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_stream_is_truncated(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """A stream cut before its completion signal raises StreamTruncated, never a short success."""
    a = adapter(sim, http, protocol, "sim-cut-a3-t10")
    with pytest.raises(StreamTruncated):
        await acollect(a.stream(REQUEST, "sim-cut-a3-t10"))
    with pytest.raises((ProviderConnectionError, ProtocolError)):
        await a.chat(REQUEST, "sim-cut-a3-t10")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_malformed_chunk_is_a_protocol_error(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """Invalid JSON in a stream (or a half body) is a retryable ProtocolError, after the events before it."""
    a = adapter(sim, http, protocol, "sim-malformed-a2-t6")
    seen: list[str] = []
    with pytest.raises(ProtocolError) as info:
        await texts_until_error(a, "sim-malformed-a2-t6", seen)
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert len("".join(seen).split()) <= 2
    with pytest.raises(ProtocolError):
        await a.chat(REQUEST, "sim-malformed-a2-t6")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_missing_terminator(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """Without [DONE] an OpenAI-style stream with finish_reason is complete; without message_stop it is not."""
    a = adapter(sim, http, protocol, "sim-nodone-t4")
    if protocol == "anthropic":
        with pytest.raises(StreamTruncated, match="message_stop"):
            await acollect(a.stream(REQUEST, "sim-nodone-t4"))
    else:
        assert len((await acollect(a.stream(REQUEST, "sim-nodone-t4"))).text.split()) == 4


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_in_band_error_after_output(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """An in-band error mid-stream raises a retryable provider error after the text before it."""
    a = adapter(sim, http, protocol, "sim-inband-a3-t8")
    seen: list[str] = []
    with pytest.raises(ProviderError) as info:
        await texts_until_error(a, "sim-inband-a3-t8", seen)
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert len("".join(seen).split()) == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["sim-empty", "sim-thinkonly"])
async def test_empty_answers_are_semantically_empty(
    sim: Simulator, http: HttpClient, protocol: str, model: str
) -> None:
    """Empty and think-only answers decode as complete but semantically empty responses."""
    for outcome in await both(adapter(sim, http, protocol, model), model):
        assert isinstance(outcome, ChatResponse)
        assert outcome.is_semantically_empty


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_refusals_are_typed(sim: Simulator, http: HttpClient, protocol: str) -> None:
    """A refusal is a RefusalError both ways (Ollama has no refusal signal: its refusal is plain text)."""
    whole, streamed = await both(adapter(sim, http, protocol, "sim-refusal"), "sim-refusal")
    if protocol == "ollama":
        assert isinstance(whole, ChatResponse) and whole.text
        return
    assert isinstance(whole, RefusalError) and isinstance(streamed, RefusalError)
