"""The walk and the stream skip entries that cannot serve a request, through the one can_serve predicate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fakes import FULL, E, Scripted, err, walk
from turnout.core.errors import AllProvidersFailed, UnsupportedRequest
from turnout.core.types import ChatRequest, NativeRequest, ResponseFormat

SHAPED = ChatRequest.of("hi", response_format=ResponseFormat(kind="json_object"))
ABLE = replace(FULL, structured_output=True, protocol="anthropic")


async def test_walk_skips_an_entry_without_structured_output() -> None:
    """An entry that cannot honour a schema is never called; the next one serves."""
    plain, able = Scripted("no"), Scripted('{"a": 1}', caps=ABLE)
    reply = (await walk(E("openai.a", "m", [plain]), E("anthropic.b", "m", [able])).run(SHAPED, "m")).response
    assert reply.text == '{"a": 1}' and plain.calls == [] and able.calls == ["m"]


async def test_walk_with_no_capable_entry_raises_unsupported() -> None:
    """No entry can serve: UnsupportedRequest naming the field, and no call is made."""
    plain = Scripted("no")
    with pytest.raises(UnsupportedRequest, match="response_format"):
        await walk(E("openai.a", "m", [plain])).run(SHAPED, "m")
    assert plain.calls == []


async def test_native_only_fields_need_the_protocol() -> None:
    """A request carrying a field only Anthropic has goes to the Anthropic entry only (streams too)."""
    native = NativeRequest(protocol="anthropic", body={}, only=("messages[0].content[0] (document)",))
    request = ChatRequest.of("hi", native=native)
    plain, able = Scripted("no"), Scripted("yes", caps=ABLE)
    reliable = walk(E("openai.a", "m", [plain]), E("anthropic.b", "m", [able]))
    assert (await reliable.run(request, "m")).response.text == "yes"
    stream = await reliable.open_stream(request, "m")
    events = [e async for batch in stream.batches() for e in batch]
    assert plain.calls == [] and plain.stream_calls == [] and able.stream_calls == ["m"]
    assert events[0].type == "text"


async def test_all_failed_carries_the_last_error() -> None:
    """AllProvidersFailed keeps the last try's exception; a 4xx's own reason is quoted in its event, nothing more."""
    bad = err(400, "field x is invalid")
    with pytest.raises(AllProvidersFailed) as info:
        await walk(E("openai.a", "m", [Scripted(bad)])).run(ChatRequest.of("hi"), "m")
    assert info.value.last_error is bad
    assert str(info.value).count("field x") == 1
    event = "event 1 (openai.a/m, try 1/3): non_retryable; kind=client_error; phase=http_response; "
    assert event + 'reason="field x is invalid"; hint=' in str(info.value)


async def test_documents_go_to_an_entry_that_takes_them() -> None:
    """A caller's documents skip an entry of another protocol unless it takes documents (Bedrock), streams too."""
    native = NativeRequest(protocol="anthropic", body={}, documents=("messages[0].content[0] (document)",))
    request = ChatRequest.of("hi", native=native)
    plain = Scripted("no")
    takes = Scripted("yes", caps=replace(FULL, protocol="bedrock", documents=True))
    reliable = walk(E("openai.a", "m", [plain]), E("bedrock.b", "m", [takes]))
    assert (await reliable.run(request, "m")).response.text == "yes"
    stream = await reliable.open_stream(request, "m")
    events = [e async for batch in stream.batches() for e in batch]
    assert plain.calls == [] and plain.stream_calls == [] and takes.stream_calls == ["m"]
    assert events[0].type == "text"
    with pytest.raises(UnsupportedRequest, match=r"messages\[0\]\.content\[0\] \(document\) need an upstream"):
        await walk(E("openai.a", "m", [plain])).run(request, "m")
    # a document only Anthropic can carry is not Bedrock's to take
    only = ChatRequest.of("hi", native=replace(native, only=("messages[0].content[1] (document)",)))
    with pytest.raises(UnsupportedRequest):
        await walk(E("bedrock.b", "m", [takes])).run(only, "m")
