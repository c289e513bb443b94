"""Google Gemini as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

import pytest

BODY = {
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
}


def gen(model: str) -> str:
    return f"/v1beta/models/{model}:generateContent"


def stream(model: str) -> str:
    return f"/v1beta/models/{model}:streamGenerateContent?alt=sse"


async def test_ok_generate_content(wire: Any) -> None:
    """A generateContent call answers candidates with thought, text and functionCall parts and usageMetadata."""
    r = await wire.post(gen("sim-ok-r2-tc1"), BODY)
    body = r.json()
    cand = body["candidates"][0]
    parts = cand["content"]["parts"]
    assert parts[0] == {"text": "lorem ipsum", "thought": True}
    assert parts[1] == {"text": "Hello from the Turnout simulator."}
    assert parts[2] == {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    assert cand["finishReason"] == "STOP"
    assert cand["content"]["role"] == "model"
    usage = body["usageMetadata"]
    assert usage["promptTokenCount"] == 4
    assert usage["thoughtsTokenCount"] == 2
    assert usage["candidatesTokenCount"] == 6
    assert usage["totalTokenCount"] == 4 + 8
    assert body["modelVersion"] == "sim-ok-r2-tc1"


async def test_ok_stream_crlf_finish_reason_last_no_done(wire: Any) -> None:
    """The alt=sse stream is CRLF-framed, its last chunk carries finishReason, and there is no [DONE]."""
    r = await wire.post(stream("gemini-2.5-flash"), BODY)
    assert r.status == 200
    assert b"\r\n\r\n" in r.body
    chunks = r.data()
    assert "[DONE]" not in chunks
    assert [c["candidates"][0].get("finishReason") for c in chunks][-1] == "STOP"
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
    assert text == "Hello from the Turnout simulator."
    assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] == 5


async def test_429_retry_info_in_body_not_headers(wire: Any) -> None:
    """A Gemini 429 carries RetryInfo.retryDelay in the body and no Retry-After header."""
    r = await wire.post(gen("sim-429-ra2"), BODY)
    assert r.status == 429
    assert "retry-after" not in {k.lower() for k in r.headers}
    err = r.json()["error"]
    assert err["status"] == "RESOURCE_EXHAUSTED"
    retry = [d for d in err["details"] if d["@type"].endswith("RetryInfo")]
    assert retry == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]
    quota = next(d for d in err["details"] if d["@type"].endswith("QuotaFailure"))
    assert "PerMinute" in quota["violations"][0]["quotaId"]


async def test_429_without_hint_has_no_retry_info(wire: Any) -> None:
    """sim-429 without ra/ms has no RetryInfo."""
    err = (await wire.post(gen("sim-429"), BODY)).json()["error"]
    assert not [d for d in err["details"] if d["@type"].endswith("RetryInfo")]


async def test_daily_quota_has_no_retry_info(wire: Any) -> None:
    """sim-quota is a per-day RESOURCE_EXHAUSTED without RetryInfo."""
    r = await wire.post(gen("sim-quota"), BODY)
    assert r.status == 429
    err = r.json()["error"]
    assert "PerDay" in err["details"][0]["violations"][0]["quotaId"]
    assert not [d for d in err["details"] if d["@type"].endswith("RetryInfo")]


@pytest.mark.parametrize(
    ("model", "status", "rpc", "fragment"),
    [
        ("sim-auth", 400, "INVALID_ARGUMENT", "API key not valid"),
        ("sim-401", 401, "UNAUTHENTICATED", "invalid authentication credentials"),
        ("sim-403", 403, "PERMISSION_DENIED", "does not have permission"),
        ("sim-404", 404, "NOT_FOUND", "models/sim-404 is not found"),
        (
            "sim-context",
            400,
            "INVALID_ARGUMENT",
            "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
        ),
        ("sim-500", 500, "INTERNAL", "internal error"),
        ("sim-503", 503, "UNAVAILABLE", "overloaded"),
    ],
)
async def test_error_bodies_have_google_shape(wire: Any, model: str, status: int, rpc: str, fragment: str) -> None:
    """Errors are {"error": {code, message, status}} with the google.rpc status name."""
    r = await wire.post(gen(model), BODY)
    assert r.status == status
    err = r.json()["error"]
    assert err["code"] == status
    assert err["status"] == rpc
    assert fragment in err["message"]


async def test_cut_stream_has_no_finish_reason(wire: Any) -> None:
    """A cut stream ends with no chunk carrying finishReason."""
    chunks = (await wire.post(stream("sim-cut-a3"), BODY)).data()
    assert len(chunks) == 3
    assert all("finishReason" not in c["candidates"][0] for c in chunks)


async def test_inband_error_chunk(wire: Any) -> None:
    """An in-band error is a {"error": ...} chunk (503 UNAVAILABLE by default) and the stream ends."""
    chunks = (await wire.post(stream("sim-inband-a1"), BODY)).data()
    assert chunks[-1]["error"]["status"] == "UNAVAILABLE"
    assert chunks[-1]["error"]["code"] == 503
    assert all("finishReason" not in c.get("candidates", [{}])[0] for c in chunks)


async def test_refusal_output_and_prompt_block(wire: Any) -> None:
    """A refusal is finishReason SAFETY without content, or promptFeedback.blockReason with no candidates."""
    out = (await wire.post(gen("sim-refusal"), BODY)).json()
    assert out["candidates"][0]["finishReason"] == "SAFETY"
    assert "content" not in out["candidates"][0]
    prompt = (await wire.post(gen("sim-refusal-prompt"), BODY)).json()
    assert "candidates" not in prompt
    assert prompt["promptFeedback"]["blockReason"] == "SAFETY"
    chunks = (await wire.post(stream("sim-refusal"), BODY)).data()
    assert chunks[-1]["candidates"][0]["finishReason"] == "SAFETY"


async def test_length_finish_and_prefill(wire: Any, sim: Any) -> None:
    """A length finish is MAX_TOKENS; a last content from "model" is logged as a prefill."""
    body = {"contents": [*BODY["contents"], {"role": "model", "parts": [{"text": "Sure,"}]}]}
    r = await wire.post(gen("sim-ok-len"), body)
    assert r.json()["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert sim.log[-1].prefill is True


async def test_key_from_header_or_query(wire: Any, sim: Any) -> None:
    """The key id comes from x-goog-api-key, or from ?key= when no header is sent."""
    await wire.post(gen("sim-ok"), BODY, headers={"x-goog-api-key": "AIza-one"})
    await wire.post(gen("sim-ok") + "?key=AIza-two", BODY)
    from turnout.core.secrets import key_id

    assert [e.key_id for e in sim.log] == [key_id("AIza-one"), key_id("AIza-two")]


async def test_unknown_method_is_404(wire: Any) -> None:
    """Only generateContent and streamGenerateContent exist."""
    assert (await wire.post("/v1beta/models/gemini:countTokens", BODY)).status == 404
