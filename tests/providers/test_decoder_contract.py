"""One contract for every stream decoder: events before an in-band error are delivered, whatever the split."""

from __future__ import annotations

import pytest
from provider_kit import make_adapter

from turnout.core.errors import ErrorClass, ProviderError
from turnout.core.types import StreamEvent, TextDelta
from turnout.providers import HttpClient

STREAMS = {
    "openai": (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}\n\n'
        b'data: {"error":{"message":"boom","type":"server_error"}}\n\n'
    ),
    "anthropic": (
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hel"}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"lo"}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    ),
    "gemini": (
        b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}]}\n\n'
        b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]}}]}\n\n'
        b'data: {"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}\n\n'
    ),
    "ollama": (
        b'{"message":{"role":"assistant","content":"Hel"},"done":false}\n'
        b'{"message":{"role":"assistant","content":"lo"},"done":false}\n'
        b'{"error":"an error was encountered while running the model"}\n'
    ),
}


@pytest.mark.parametrize("family", sorted(STREAMS))
@pytest.mark.parametrize("split", ["whole", "bytewise"])
async def test_text_before_an_in_band_error_is_always_delivered(family: str, split: str) -> None:
    """Text decoded before an in-band error reaches the caller, and then the error is raised."""
    http = HttpClient()
    try:
        decoder = make_adapter(http, family, "http://127.0.0.1:9").decoder("m")
        body = STREAMS[family]
        chunks = [body] if split == "whole" else [body[i : i + 1] for i in range(len(body))]
        events: list[StreamEvent] = []

        def drive() -> None:
            for chunk in chunks:
                events.extend(decoder.feed(chunk))
                if decoder.done:
                    break
            decoder.finish()

        with pytest.raises(ProviderError) as info:
            drive()
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello"
        assert info.value.error_class is ErrorClass.RETRYABLE
    finally:
        await http.aclose()
