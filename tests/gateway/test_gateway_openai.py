"""The official openai SDK against the gateway, served by simulator upstreams of every protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest
from gateway_support import (
    GATEWAY_KEY,
    MESSAGES,
    PROTOCOLS,
    SIM_TEXT,
    TOOL,
    config,
    decode_header,
    gateway,
    post,
    profile,
)

from turnout.core.types import Message
from turnout.gateway import GatewayServer
from turnout.gateway.openai_surface import OpenAISurface
from turnout.sim import Simulator


def sdk(server: GatewayServer, key: str = GATEWAY_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


async def read_text(stream: Any, into: list[str]) -> None:
    """Collect the streamed content into ``into`` (so a test still sees it when the stream raises)."""
    async for chunk in stream:
        into.append(chunk.choices[0].delta.content or "" if chunk.choices else "")


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_every_upstream_protocol_serves_the_openai_surface(sim: Simulator, protocol: str) -> None:
    """An OpenAI client gets the answer whatever protocol the upstream speaks, streamed and not."""
    family = PROTOCOLS[protocol][0]
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "sim-ok", protocol=protocol))
    async with gateway(toml) as server, sdk(server) as client:
        completion = await client.chat.completions.create(model="", messages=MESSAGES)
        stream = await client.chat.completions.create(model="", messages=MESSAGES, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert completion.choices[0].message.content == SIM_TEXT
    assert completion.model == "sim-ok"
    assert text == SIM_TEXT
    assert [e.protocol for e in sim.log] == [PROTOCOLS[protocol][1]] * 2


async def test_answer_carries_served_model_and_attribution_headers(sim: Simulator) -> None:
    """A direct answer names its profile, model and one attempt, and has no fallback header."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server, sdk(server) as client:
        raw = await client.chat.completions.with_raw_response.create(model="openai.main", messages=MESSAGES)
    completion = raw.parse()
    assert completion.model == "sim-ok"
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    assert raw.headers["x-turnout-provider"] == "openai.main"
    assert raw.headers["x-turnout-model"] == "sim-ok"
    assert raw.headers["x-turnout-attempts"] == "1"
    assert "x-turnout-fallback" not in raw.headers


@pytest.mark.parametrize(
    ("primary", "extra", "outcomes"),
    [
        ("sim-429", "", ["status:429", "ok"]),
        ("sim-503", "", ["status:503", "status:503", "ok"]),
        ("sim-silence", "first_token_timeout_secs = 0.2\n", ["client_disconnected", "ok"]),
    ],
    ids=["429", "503", "timeout"],
)
async def test_fallback_after_upstream_failure_is_announced(
    sim: Simulator, primary: str, extra: str, outcomes: list[str]
) -> None:
    """After a 429, repeated 503s or a silent upstream, another family serves and the header says so."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", primary, extra='fallback = ["anthropic.backup"]\n' + extra),
        profile(sim, "anthropic.backup", "sim-ok", protocol="anthropic"),
    )
    async with gateway(toml) as server, sdk(server) as client:
        raw = await client.chat.completions.with_raw_response.create(model="", messages=MESSAGES)
    assert raw.parse().model == "sim-ok"
    assert raw.headers["x-turnout-provider"] == "anthropic.backup"
    assert raw.headers["x-turnout-attempts"] == str(len(outcomes))
    assert raw.headers["x-turnout-fallback"].startswith("UTF-8''")
    assert decode_header(raw.headers["x-turnout-fallback"]) == (
        f"⚡ {primary} (openai.main) was unavailable; this reply was served by sim-ok (anthropic.backup)."
    )
    log = await sim.wait_for_log(len(outcomes))
    assert [e.outcome for e in log] == outcomes


async def test_stream_with_usage_and_headers_of_the_producing_entry(sim: Simulator) -> None:
    """A stream ends with a usage chunk and [DONE]; its headers name the fallback that produced it."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-429", extra='fallback = ["gemini.backup"]\n'),
        profile(sim, "gemini.backup", "sim-ok-t4", protocol="gemini"),
    )
    async with (
        gateway(toml) as server,
        sdk(server) as client,
        client.chat.completions.with_streaming_response.create(
            model="", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        ) as response,
    ):
        headers = response.headers
        chunks = [c async for c in await response.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 4
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4
    assert {c.model for c in chunks} == {"sim-ok-t4"}
    assert headers["x-turnout-provider"] == "gemini.backup"
    assert headers["x-turnout-attempts"] == "2"
    assert "gemini.backup" in decode_header(headers["x-turnout-fallback"])


async def test_a_stream_that_fails_to_open_once_is_retried_on_its_entry(sim: Simulator) -> None:
    """One 500 at stream open is retried on the same entry: the primary model answers, with no fallback."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-500-then-ok-t4", extra='fallback = ["gemini.backup"]\n'),
        profile(sim, "gemini.backup", "sim-ok-t2", protocol="gemini"),
    )
    async with (
        gateway(toml) as server,
        sdk(server) as client,
        client.chat.completions.with_streaming_response.create(model="", messages=MESSAGES, stream=True) as response,
    ):
        headers = response.headers
        chunks = [c async for c in await response.parse()]
    assert len("".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split()) == 4
    assert {c.model for c in chunks} == {"sim-500-then-ok-t4"}
    assert (headers["x-turnout-provider"], headers["x-turnout-attempts"]) == ("openai.main", "2")
    assert "x-turnout-fallback" not in headers
    assert [(e.model, e.outcome) for e in sim.log] == [
        ("sim-500-then-ok-t4", "status:500"),
        ("sim-500-then-ok-t4", "ok"),
    ]


async def test_sync_client_in_a_thread_streams_and_completes(sim: Simulator) -> None:
    """The synchronous OpenAI client works too, streaming and not."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server:

        def call() -> tuple[str | None, str]:
            with openai.OpenAI(base_url=f"{server.url}/v1", api_key=GATEWAY_KEY, max_retries=0) as client:
                whole = client.chat.completions.create(model="", messages=MESSAGES)
                stream = client.chat.completions.create(model="", messages=MESSAGES, stream=True)
                return whole.choices[0].message.content, "".join(
                    c.choices[0].delta.content or "" for c in stream if c.choices
                )

        whole, streamed = await asyncio.to_thread(call)
    assert whole == streamed == SIM_TEXT


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_tool_calls_whole_and_streamed(sim: Simulator, protocol: str) -> None:
    """Tool calls come back as OpenAI tool_calls, and the SDK's stream helper assembles their deltas."""
    family = PROTOCOLS[protocol][0]
    toml = config(f"{family}.up", profile(sim, f"{family}.up", "sim-ok-tc2", protocol=protocol))
    async with gateway(toml) as server, sdk(server) as client:
        completion = await client.chat.completions.create(model="", messages=MESSAGES, tools=[TOOL])  # type: ignore[list-item]
        async with client.chat.completions.stream(model="", messages=MESSAGES, tools=[TOOL]) as stream:  # type: ignore[list-item]
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
    for choice in (completion.choices[0], final.choices[0]):
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert [c.function.name for c in calls] == ["get_weather", "get_weather"]  # type: ignore[union-attr]
        assert orjson.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]


async def test_cut_stream_raises_in_the_sdk(sim: Simulator) -> None:
    """A stream cut after output ends with an in-band error (no [DONE]) and the SDK raises."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-cut-a3"))
    async with gateway(toml) as server, sdk(server) as client:
        stream = await client.chat.completions.create(model="", messages=MESSAGES, stream=True)
        seen: list[str] = []
        with pytest.raises(openai.APIError) as info:
            await read_text(stream, seen)
    assert "".join(seen) == "Hello from the"
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "stream_interrupted"
    assert [e.outcome for e in await sim.wait_for_log(1)] == ["cut"]


async def test_every_upstream_rate_limited_is_429_with_retry_after(sim: Simulator) -> None:
    """When every attempt was rate limited the answer is 429 with Retry-After, in OpenAI's shape."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-429-ra3", extra='fallback = ["openai.other"]\n'),
        profile(sim, "openai.other", "sim-429-ra7"),
    )
    async with gateway(toml) as server, sdk(server) as client:
        with pytest.raises(openai.RateLimitError) as first:
            await client.chat.completions.create(model="", messages=MESSAGES)
        # both profiles now cool down: both are skipped, then both tried in order (the panic rule)
        with pytest.raises(openai.RateLimitError) as second:
            await client.chat.completions.create(model="", messages=MESSAGES)
    assert first.value.response.headers["retry-after"] == "3"
    assert first.value.code == "rate_limit_exceeded"
    assert 1 <= int(second.value.response.headers["retry-after"]) <= 3
    assert second.value.response.headers["x-turnout-attempts"] == "4"
    assert [e.model for e in sim.log] == ["sim-429-ra3", "sim-429-ra7", "sim-429-ra3", "sim-429-ra7"]


async def test_all_failed_is_502_with_the_aggregate_message(sim: Simulator) -> None:
    """Other failures are a 502 carrying the content-free aggregate message."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-500"))
    async with gateway(toml) as server, sdk(server) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model="", messages=MESSAGES)
    assert info.value.status_code == 502
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith("All model providers/models failed after 2 failure event(s)")
    assert info.value.code == "all_providers_failed"
    assert "sk-up" not in info.value.message


async def test_context_window_is_400_context_length_exceeded(sim: Simulator) -> None:
    """An upstream context-window error is a 400 with code context_length_exceeded."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-context-lim8000"))
    async with gateway(toml) as server, sdk(server) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="", messages=MESSAGES)
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "messages"
    assert info.value.type == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
async def test_refusal_is_a_normal_answer_in_refusal_form(sim: Simulator, stream: bool) -> None:
    """A refusal is a 200 whose message carries refusal and finishes with content_filter, with its request id."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-refusal"))
    async with gateway(toml) as server, sdk(server) as client:
        if stream:
            chunks = [c async for c in await client.chat.completions.create(model="", messages=MESSAGES, stream=True)]
            refusal = "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices)
            finish = chunks[-1].choices[0].finish_reason
        else:
            completion = await client.chat.completions.create(model="", messages=MESSAGES)
            refusal = completion.choices[0].message.refusal or ""
            finish = completion.choices[0].finish_reason
        raw = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES, "stream": stream})
    assert refusal
    assert finish == "content_filter"
    assert raw.status == 200 and raw.headers["x-request-id"] == raw.headers["request-id"]


async def test_bad_or_missing_key_is_401_and_nothing_is_forwarded(sim: Simulator) -> None:
    """Without a valid key the answer is 401 and the upstream never sees the request."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
    async with gateway(toml) as server, sdk(server, "wrong-key") as client:
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(model="", messages=MESSAGES)
        missing = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES}, key=None)
    assert info.value.code == "invalid_api_key"
    assert missing.status == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert sim.log == []


async def test_body_over_the_limit_is_413_and_nothing_is_forwarded(sim: Simulator) -> None:
    """A body over [gateway] max_body_bytes is refused with 413 before anything is forwarded."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-ok"), extra="max_body_bytes = 4096\n")
    async with gateway(toml) as server, sdk(server) as client:
        ok = await client.chat.completions.create(model="", messages=MESSAGES)
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(model="", messages=[{"role": "user", "content": "x" * 5000}])
    assert ok.choices[0].message.content == SIM_TEXT
    assert info.value.status_code == 413
    assert info.value.code == "request_too_large"
    assert len(sim.log) == 1


async def test_models_lists_hints_profiles_and_default_models(sim: Simulator) -> None:
    """GET /v1/models lists every hint, profile and the default profile's models, each with what it serves."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-ok", extra='fallback_models = ["sim-ok-t3"]\n'),
        profile(sim, "anthropic.fast", "sim-ok", protocol="anthropic"),
        extra='[[model_routes]]\nhint = "fast"\nmodel_provider = "anthropic.fast"\nmodel = "sim-ok-t2"\n',
    )
    async with gateway(toml) as server, sdk(server) as client:
        models = [m.id async for m in client.models.list()]
        one = await client.models.retrieve("hint:fast")
    assert models == ["hint:fast", "openai.main", "anthropic.fast", "sim-ok", "sim-ok-t3"]
    assert one.model_extra is not None
    # anthropic.fast is pinned to sim-ok, so the route's own model is not what it serves
    assert one.model_extra["turnout"] == {"kind": "hint", "provider": "anthropic.fast", "model": "sim-ok"}


async def test_model_selects_hint_profile_or_plain_model(sim: Simulator) -> None:
    """A hint, a family.alias or family.alias/<model> of an unpinned profile routes; a pinned default serves its pin."""
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-ok"),
        profile(sim, "anthropic.fast", "sim-ok-t2", protocol="anthropic"),
        f'[providers.models.ollama.local]\nuri = "{sim.base_url("ollama")}"\n',
        extra='[[model_routes]]\nhint = "fast"\nmodel_provider = "anthropic.fast"\nmodel = "sim-ok-t2"\n',
    )
    served = {}
    async with gateway(toml) as server, sdk(server) as client:
        for model in ("hint:fast", "anthropic.fast", "ollama.local/sim-ok-t3", ""):
            raw = await client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES)
            served[model] = (raw.headers["x-turnout-provider"], raw.parse().model)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="ollama.local", messages=MESSAGES)
        with pytest.raises(openai.NotFoundError) as unlisted:
            await client.chat.completions.create(model="gpt-4.1", messages=MESSAGES)
    assert served == {
        "hint:fast": ("anthropic.fast", "sim-ok-t2"),
        "anthropic.fast": ("anthropic.fast", "sim-ok-t2"),
        "ollama.local/sim-ok-t3": ("ollama.local", "sim-ok-t3"),
        "": ("openai.main", "sim-ok"),
    }
    assert info.value.code == "missing_model"
    assert unlisted.value.code == "model_not_found"


async def test_client_disconnect_leaves_the_upstream_call_to_end_until_the_gateway_stops(sim: Simulator) -> None:
    """A client that goes away leaves the upstream request to end on its own (its usage is what is billed); one
    still under way when the gateway stops (after ``abandoned_wait_s``) is cut: the simulator logs
    client_disconnected.
    """
    toml = config("openai.main", profile(sim, "openai.main", "sim-silence"))
    async with gateway(toml) as server, sdk(server) as client:
        server.gateway.client.abandoned_wait_s = 0.0
        task = asyncio.ensure_future(client.chat.completions.create(model="", messages=MESSAGES))
        await sim.wait_for_log(1, settled=False)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(10_000):  # the gateway sees the hang-up (one turn of the loop at a time)
            if not server.gateway.in_flight:
                break
            await asyncio.sleep(0)
        assert [e.outcome for e in sim.log] == ["pending"]
    log = await sim.wait_for_log(1)
    assert [e.outcome for e in log] == ["client_disconnected"]


async def test_client_leaving_a_stream_cancels_the_upstream_stream(sim: Simulator) -> None:
    """A client that stops reading a stream mid-answer closes the upstream stream too."""
    toml = config("openai.main", profile(sim, "openai.main", "sim-stall-a2"))
    async with gateway(toml) as server, sdk(server) as client:
        stream = await client.chat.completions.create(model="", messages=MESSAGES, stream=True)
        first: Any = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = chunk
                break
        await stream.close()
        log = await sim.wait_for_log(1)
    assert first is not None
    assert [e.outcome for e in log] == ["client_disconnected"]


async def test_model_lookup_agrees_with_what_chat_accepts(sim: Simulator) -> None:
    """GET /v1/models/{id} finds every listed name and every name chat routes (a plain model, profile/model).

    With ``allow_any_model`` a plain model reaches the default profile; without it, see the access tests.
    """
    toml = config(
        "openai.main",
        profile(sim, "openai.main", "sim-ok"),
        f'[providers.models.openai.bare]\nuri = "{sim.base_url("openai")}"\napi_key = "sk-up-bare"\n',
        extra="allow_any_model = true\n",
    )
    async with gateway(toml) as server, sdk(server) as client:
        plain = await client.models.retrieve("gpt-unlisted")
        chat = await client.chat.completions.create(model="gpt-unlisted", messages=MESSAGES)
        pinned = await client.models.retrieve("openai.bare/sim-ok-t2")
        bare = await client.models.retrieve("openai.bare")  # listed: a profile a client names a model after
        with pytest.raises(openai.BadRequestError):  # ... but chat needs that model
            await client.chat.completions.create(model="openai.bare", messages=MESSAGES)
    assert chat.choices[0].message.content == SIM_TEXT
    assert plain.model_extra is not None and plain.model_extra["turnout"]["provider"] == "openai.main"
    assert plain.model_extra["turnout"]["model"] == "gpt-unlisted"
    assert pinned.model_extra is not None and pinned.model_extra["turnout"]["model"] == "sim-ok-t2"
    assert bare.model_extra is not None and bare.model_extra["turnout"]["model"] is None


def test_text_messages_with_the_common_options_become_turnouts_call() -> None:
    """Text messages and the common scalar options are read into Turnout's terms; the body passes through whole.

    ``developer`` is a system message, a name is kept on user messages only, ``max_completion_tokens`` wins over
    ``max_tokens``, ``user`` is the sender, and options Turnout does not model (``top_p``, ``seed``) stay in the
    body sent to an OpenAI Chat upstream.
    """
    body = {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": "Answer in English.", "name": "ops"},
            {"role": "user", "content": "hi", "name": "ann"},
            {"role": "assistant", "content": "hello", "name": "bot"},
            {"role": "user", "content": ""},
        ],
        "stream": True,
        "temperature": 1,
        "max_tokens": 64,
        "max_completion_tokens": 32,
        "user": "u-1",
        "top_p": 0.5,
        "seed": 3,
    }
    call = OpenAISurface().parse(orjson.dumps(body))
    assert call.model == "gpt-4.1-mini"
    assert call.messages == (
        Message(role="system", content="You are terse."),
        Message(role="system", content="Answer in English."),
        Message(role="user", content="hi", name="ann"),
        Message(role="assistant", content="hello"),
        Message(role="user", content=""),
    )
    assert call.stream and not call.include_usage
    assert call.temperature == 1.0 and call.max_tokens == 32 and call.choices == 1
    assert call.sender == "u-1"
    assert call.tools == () and call.tool_choice is None and call.response_format is None
    assert call.native is not None and call.native.body == body and call.native.only == ()
