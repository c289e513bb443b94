"""Azure OpenAI chat as the simulator speaks it, decoded with raw aiohttp."""

from __future__ import annotations

from typing import Any

from turnout.core.secrets import key_id


def path(deployment: str) -> str:
    return f"/openai/deployments/{deployment}/chat/completions?api-version=2024-10-21"


BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "hello there"}]}


async def test_deployment_is_the_model_and_api_key_is_logged(wire: Any, sim: Any) -> None:
    """The deployment names the model; the api-key header gives the key id."""
    r = await wire.post(path("my-gpt"), BODY, headers={"api-key": "azure-key"})
    assert r.json()["model"] == "my-gpt"
    assert r.json()["choices"][0]["content_filter_results"]["hate"] == {"filtered": False, "severity": "safe"}
    assert "prompt_filter_results" in r.json()
    entry = sim.log[-1]
    assert (entry.protocol, entry.model, entry.key_id) == ("azure", "my-gpt", key_id("azure-key"))


async def test_stream_opens_with_prompt_filter_chunk(wire: Any) -> None:
    """The first chunk has choices:[], empty id/model, created 0 and prompt_filter_results."""
    chunks = (await wire.post(path("sim-ok"), {**BODY, "stream": True})).data()
    first = chunks[0]
    assert (first["choices"], first["id"], first["model"], first["created"]) == ([], "", "", 0)
    assert first["prompt_filter_results"][0]["prompt_index"] == 0
    assert chunks[-1] == "[DONE]"


async def test_content_filter_error(wire: Any) -> None:
    """sim-policy on Azure is the 400 content_filter body with ResponsibleAIPolicyViolation."""
    r = await wire.post(path("sim-policy"), BODY)
    assert r.status == 400
    err = r.json()["error"]
    assert err["code"] == "content_filter"
    assert err["innererror"]["code"] == "ResponsibleAIPolicyViolation"
    assert err["innererror"]["content_filter_result"]["violence"]["filtered"] is True


async def test_429_has_string_code_and_retry_after(wire: Any) -> None:
    """Azure's 429 body has code "429" (a string) and Retry-After when asked."""
    r = await wire.post(path("sim-429-ra7"), BODY)
    assert r.status == 429
    assert r.json()["error"]["code"] == "429"
    assert "retry after 7 seconds" in r.json()["error"]["message"]
    assert r.headers["Retry-After"] == "7"


async def test_refusal_is_content_filter_finish(wire: Any) -> None:
    """A refusal on Azure finishes with content_filter and no text."""
    choice = (await wire.post(path("sim-refusal"), BODY)).json()["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"] is None
