"""Same protocol, nothing lost: unmodelled parts pass through unchanged; across protocols they map or are a 400."""

from __future__ import annotations

from typing import Any

import openai
from capture import CAPTURED_TEXT, capture_upstream
from gateway_support import GATEWAY_KEY, config, gateway, post
from test_gateway_anthropic_extras import DOCUMENT, anthropic_profile, openai_profile

FILE_PART = {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "shell", "description": "run a command"}}
FUNCTION_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
OTHER_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


async def test_openai_upstream_gets_the_client_body_unchanged() -> None:
    """File parts, custom tools, allowed_tools, role function and unmodelled fields reach an OpenAI upstream as sent."""
    body: dict[str, Any] = {
        "model": "",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Summarise"}, FILE_PART]},
            {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}},
            {"role": "function", "name": "get_weather", "content": "sunny"},
        ],
        "tools": [FUNCTION_TOOL, CUSTOM_TOOL],
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [FUNCTION_TOOL]}},
        "seed": 7,
        "logprobs": True,
    }
    async with capture_upstream() as cap:
        async with gateway(config("openai.main", openai_profile(cap.url))) as server:
            raw = await post(server, "/v1/chat/completions", body)
        sent = cap.last.body
    assert raw.status == 200
    assert sent == {**body, "model": "gpt-cap"}


async def test_n_choices_come_back_from_an_openai_upstream() -> None:
    """N > 1 is served by an OpenAI upstream: every choice reaches the client (the SDK sees them all)."""
    async with capture_upstream() as cap:
        async with gateway(config("openai.main", openai_profile(cap.url))) as server:
            client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
            done = await client.chat.completions.create(model="", n=3, messages=[{"role": "user", "content": "hi"}])
            await client.close()
        assert cap.last.body["n"] == 3
    assert [c.message.content for c in done.choices] == [f"{CAPTURED_TEXT} {i}" for i in range(3)]
    assert done.id.startswith("chatcmpl-") and done.model == "gpt-cap"


async def test_file_part_to_another_protocol_is_a_400_naming_field_and_route() -> None:
    """A file part on a route with only an Anthropic upstream is refused before any upstream call."""
    body = {"model": "hint:docs", "messages": [{"role": "user", "content": [FILE_PART]}]}
    route = '[[model_routes]]\nhint = "docs"\nmodel_provider = "anthropic.main"\nmodel = "claude-cap"\n'
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url), extra=route)) as server:
            raw = await post(server, "/v1/chat/completions", body)
        assert cap.seen == []
    assert raw.status == 400
    error = raw.json()["error"]
    assert error["code"] == "unsupported_request"
    assert "messages[0].content[0] (file)" in error["message"] and "route 'hint:docs'" in error["message"]


async def test_allowed_tools_is_translated_for_another_protocol() -> None:
    """tool_choice allowed_tools becomes the allowed tools and their mode for an Anthropic upstream."""
    body = {
        "model": "",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [FUNCTION_TOOL, OTHER_TOOL],
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [FUNCTION_TOOL]}},
    }
    async with capture_upstream() as cap:
        async with gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
            raw = await post(server, "/v1/chat/completions", body)
        sent = cap.last.body
    assert raw.status == 200
    assert [t["name"] for t in sent["tools"]] == ["get_weather"]
    assert sent["tool_choice"] == {"type": "any"}


async def test_anthropic_answer_with_a_document_is_relayed_as_the_upstream_sent_it() -> None:
    """The answer to a request holding a document block is the Anthropic upstream's own message (ids replaced)."""
    body = {"model": "", "max_tokens": 50, "messages": [{"role": "user", "content": [DOCUMENT]}]}
    async with capture_upstream() as cap, gateway(config("anthropic.main", anthropic_profile(cap.url))) as server:
        raw = await post(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
    answer = raw.json()
    assert answer["content"] == [{"type": "text", "text": CAPTURED_TEXT}]
    assert answer["usage"] == {"input_tokens": 7, "output_tokens": 2}
    assert answer["id"] == f"msg_{raw.headers['request-id']}"


async def test_token_limit_goes_under_the_name_the_upstream_reads() -> None:
    """A passed-through max_tokens reaches official OpenAI as max_completion_tokens (its adapter's own choice)."""
    body = {"model": "", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    async with capture_upstream() as cap:
        async with gateway(config("openai.main", openai_profile(cap.url))) as server:
            raw = await post(server, "/v1/chat/completions", body)
        sent = cap.last.body
    assert raw.status == 200
    assert sent["max_completion_tokens"] == 64 and "max_tokens" not in sent
