"""A caller's mistake is the caller's ``InvalidRequest``, raised before any attempt, touching no shared state.

Every case runs a real client over real HTTP adapters against a loopback upstream that counts what it receives:
a mistake must reach no upstream, open no breaker, cool nothing down, and leave the next call served by the
first entry on its first try.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from servers import loopback_app
from turnout import ChatRequest, Client, Environment, InvalidRequest, ResponseFormat, ToolSpec
from turnout.providers.openai_chat import OpenAIChatAdapter

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "sunny"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


@dataclass
class Upstream:
    """A loopback Chat Completions upstream: the bodies it received, in order."""

    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _deep(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"x": value}
    return value


@asynccontextmanager
async def three_profiles() -> AsyncIterator[tuple[Client, Upstream]]:
    """A client whose default profile falls back twice, every profile on one counting upstream (default retries)."""
    upstream = Upstream()

    async def chat(request: web.Request) -> web.Response:
        upstream.bodies.append(await request.json())
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with loopback_app(app) as url:
        upstream.url = url
        profiles = "".join(
            f'[providers.models.openai.{name}]\nuri = "{url}/v1"\napi_key = "sk-{name}-0000"\nmodel = "m-{name}"\n'
            + (f'fallback = ["openai.{after}"]\n' if after else "")
            for name, after in (("a", "b"), ("b", "c"), ("c", None))
        )

        async def instant(seconds: float) -> None:
            return None

        client = Client.from_toml(
            f'default_provider = "openai.a"\n[ledger]\nenabled = false\n{profiles}',
            ledger=False,
            env=Environment(sleep=instant),
        )
        async with client:
            yield client, upstream


async def _untouched(client: Client, upstream: Upstream) -> None:
    """Nothing reached the upstream, no shared state changed, and the first entry serves a plain call at once."""
    assert upstream.bodies == []
    status = client.status()
    assert (status["breakers"], status["cooldowns"], status["dead_keys"]) == ([], {}, [])
    assert not client.factory.breakers.streaks
    reply = await client.chat("Weather?")
    assert (reply.served.provider, len(reply.attempts)) == ("openai.a", 1)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def _tool(parameters: Any, name: Any = "f") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


MISTAKES: list[tuple[str, dict[str, Any], str]] = [
    ("tool parameters as a string", {"tools": [_tool("object")]}, "tools[0].function.parameters"),
    (
        "an integer beyond 64 bits in a tool schema",
        {"tools": [_tool({"type": "object", "properties": {"n": {"const": 2**70}}})]},
        "tools[0].function.parameters",
    ),
    ("a tool schema nested 300 deep", {"tools": [_tool(_deep(300))]}, "tools[0].function.parameters"),
    ("tools as a dict", {"tools": TOOL}, "tools"),
    ("a tool name of None", {"tools": [_tool({"type": "object"}, name=None)]}, "tools[0].function.name"),
    ("a ToolSpec name of None", {"tools": [ToolSpec(name=None)]}, "tools[0].name"),  # type: ignore[arg-type]
    (
        "a ResponseFormat whose schema is a string",
        {"response_format": ResponseFormat(kind="json_schema", schema="object")},  # type: ignore[arg-type]
        "response_format.schema",
    ),
    (
        "a response_format schema nested 300 deep",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": _deep(300)}}},
        "response_format.schema",
    ),
    ("an unknown response_format type", {"response_format": {"type": "yaml"}}, "response_format.type"),
    ("temperature as a word", {"temperature": "hot"}, "temperature"),
    ("max_tokens as a string", {"max_tokens": "10"}, "max_tokens"),
    ("an unknown tool_choice", {"tool_choice": "bogus", "tools": [TOOL]}, "tool_choice"),
    ("an unknown tool_choice without tools", {"tool_choice": "bogus"}, "tool_choice"),
]
BAD_MESSAGES: list[tuple[str, Any, str]] = [
    ("integer content", [{"role": "user", "content": 5}], "messages[0].content"),
    ("an unknown role", [{"role": "robot", "content": "hi"}], "messages[0].role"),
    ("a None message", [None], "messages[0]"),
    ("messages as None", None, "messages"),
]


@pytest.mark.parametrize(("what", "options", "path"), MISTAKES, ids=[m[0] for m in MISTAKES])
async def test_a_mistaken_option_is_invalid_request_before_any_attempt(
    what: str, options: dict[str, Any], path: str
) -> None:
    """Each mistaken option raises InvalidRequest naming it, for chat and stream, and costs no one anything."""
    async with three_profiles() as (client, upstream):
        with pytest.raises(InvalidRequest) as chat_error:
            await client.chat("Weather?", **options)
        with pytest.raises(InvalidRequest) as stream_error:
            client.stream("Weather?", **options)
        await _untouched(client, upstream)
    assert chat_error.value.path == stream_error.value.path == path
    assert str(chat_error.value).startswith(f"invalid request: {path}: ")


@pytest.mark.parametrize(("what", "messages", "path"), BAD_MESSAGES, ids=[m[0] for m in BAD_MESSAGES])
async def test_a_mistaken_message_is_invalid_request_before_any_attempt(what: str, messages: Any, path: str) -> None:
    """A message the types cannot take raises InvalidRequest naming it (not a raw TypeError) and costs nothing."""
    async with three_profiles() as (client, upstream):
        with pytest.raises(InvalidRequest) as error:
            await client.chat(messages)
        with pytest.raises(InvalidRequest):
            await client.turn(messages)
        if messages is not None:
            with pytest.raises(InvalidRequest):
                client.session().extend(messages)
        await _untouched(client, upstream)
    assert error.value.path == path


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (
            {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}},
            {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}},
        ),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            ResponseFormat(kind="json_schema", schema=SCHEMA, name="weather"),
            {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": False}},
        ),
    ],
)
async def test_response_format_is_accepted_as_the_openai_dict_or_a_response_format(
    given: Mapping[str, Any] | ResponseFormat, sent: dict[str, Any]
) -> None:
    """The OpenAI ``response_format`` dict (and ResponseFormat) is sent as structured output to the first entry."""
    async with three_profiles() as (client, upstream):
        reply = await client.chat("Weather?", response_format=given)
    assert (reply.served.provider, len(reply.attempts)) == ("openai.a", 1)
    assert [body["response_format"] for body in upstream.bodies] == [sent]


async def test_a_text_response_format_asks_for_plain_text() -> None:
    """``{"type": "text"}`` is OpenAI's plain text: no structured output is asked for."""
    async with three_profiles() as (client, upstream):
        await client.chat("Weather?", response_format={"type": "text"})
    assert "response_format" not in upstream.bodies[0]


async def test_tool_choice_is_accepted_as_the_openai_dict() -> None:
    """``tool_choice={"type": "function", "function": {"name": "f"}}`` names tool f, sent as the upstream's choice."""
    async with three_profiles() as (client, upstream):
        reply = await client.chat("Weather?", tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}})
    assert (reply.served.provider, len(reply.attempts)) == ("openai.a", 1)
    assert upstream.bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "f"}}


async def test_an_adapter_that_cannot_build_its_body_raises_invalid_request_and_no_provider_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a request builder is the InvalidRequest of the shared request cycle: no attempt, retry or breaker."""

    def broken(*args: object, **kwargs: object) -> dict[str, Any]:
        raise KeyError("a builder's bug")

    async with three_profiles() as (client, upstream):
        with monkeypatch.context() as patch:
            patch.setattr(OpenAIChatAdapter, "build_body", broken)
            with pytest.raises(InvalidRequest, match=r"openai\.a could not build the request body \(KeyError\)"):
                await client.chat("Weather?")
            stream = client.stream("Weather?")
            with pytest.raises(InvalidRequest):
                async for _ in stream:
                    pass
        await _untouched(client, upstream)


async def test_a_body_the_encoder_refuses_is_invalid_request_of_the_request_cycle() -> None:
    """A body orjson cannot encode (built by hand, past the argument checks) is InvalidRequest, not a provider error."""
    async with three_profiles() as (client, upstream):
        target = client.route()
        adapter = target.reliable.entries[0].providers[0]
        request = ChatRequest.of("Weather?", tools=[ToolSpec(name="f", parameters=_deep(300))])  # no checks here
        with pytest.raises(InvalidRequest, match="cannot be encoded as JSON"):
            await adapter.chat(request, "m-a")
        await _untouched(client, upstream)


def test_the_error_names_the_argument_and_never_its_value() -> None:
    """The message says which argument and why, without echoing what was sent."""
    error = InvalidRequest("must be a number, not str", path="temperature")
    assert (error.path, error.reason, str(error)) == (
        "temperature",
        "must be a number, not str",
        "invalid request: temperature: must be a number, not str",
    )
