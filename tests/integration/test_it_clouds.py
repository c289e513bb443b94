"""One Claude model across three clouds: Anthropic → Bedrock → Vertex AI through the client, against the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from it_support import KEY, client, config, trail, upstream

from google_creds import service_account_file
from turnout.core.types import Final, NativeRequest
from turnout.sim import Simulator

MODEL = "claude-sonnet-4-5"
BEDROCK_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_ID = "claude-sonnet-4-5@20250929"
BEDROCK_KEY = "bedrock-api-key-0001"


def chain(sim: Simulator, tmp_path: Path, *, model: str = MODEL) -> dict[str, Any]:
    """Anthropic, then Bedrock, then Vertex, all configured with the one canonical model name."""
    credentials = service_account_file(tmp_path, sim.google_token_uri)
    return config(
        {
            "anthropic.main": {"uri": sim.url, "api_key": KEY, "model": model, "fallback": ["bedrock.main"]},
            "bedrock.main": {
                "uri": sim.url,
                "region": "us-east-1",
                "api_key": BEDROCK_KEY,
                "model": model,
                "fallback": ["vertex.main"],
            },
            "vertex.main": {
                "uri": sim.url,
                "project": "sim-project",
                "region": "us-east5",
                "model": model,
                "credentials_file": str(credentials),
            },
        },
        retries=0,
    )


@pytest.mark.parametrize("streamed", [False, True])
async def test_overloaded_anthropic_then_throttled_bedrock_is_served_by_vertex(
    sim: Simulator, tmp_path: Path, streamed: bool
) -> None:
    """Anthropic's 529 moves on to Bedrock, Bedrock's throttling to Vertex, which serves the same model's name."""
    sim.set_script({"models": {MODEL: {"steps": ["529"]}, BEDROCK_ID: {"steps": ["429"]}}})
    async with client(chain(sim, tmp_path)) as c:
        if streamed:
            stream = c.stream("hello")
            events = [e async for e in stream]
            assert isinstance(events[-1], Final)
            reply = stream.response
        else:
            reply = await c.chat("hello")
    assert reply.text
    assert (reply.served.provider, reply.served.model) == ("vertex.main", MODEL)
    assert (reply.requested.provider, reply.requested.model) == ("anthropic.main", MODEL)
    assert trail(reply.attempts) == [
        ("anthropic.main", MODEL, "retryable", 529),
        ("bedrock.main", MODEL, "rate_limited", 429),
        ("vertex.main", MODEL, "ok", None),
    ]
    # each cloud was sent its own id for the one configured name
    assert await upstream(sim, 3) == [(MODEL, "status:529"), (BEDROCK_ID, "status:429"), (VERTEX_ID, "ok")]
    assert reply.fallback is not None


async def test_a_token_the_simulator_expired_is_renewed_once(sim: Simulator, tmp_path: Path) -> None:
    """After Google's side expires the token, the next call gets a 401, renews the token and is served."""
    cfg = chain(sim, tmp_path)
    cfg["default_provider"] = "vertex.main"
    async with client(cfg) as c:
        first = await c.chat("one")
        assert sim.google.expire() == 1
        second = await c.chat("two")
    assert first.served.provider == second.served.provider == "vertex.main"
    assert trail(second.attempts) == [("vertex.main", MODEL, "ok", None)]
    assert sim.google.issued == 2
    assert await upstream(sim, 3) == [(VERTEX_ID, "ok"), (VERTEX_ID, "status:401"), (VERTEX_ID, "ok")]


async def test_gemini_on_vertex_streams(sim: Simulator, tmp_path: Path) -> None:
    """A Gemini model on a Vertex profile goes to the Google publisher and streams to completion."""
    credentials = service_account_file(tmp_path, sim.google_token_uri)
    cfg = config(
        {
            "vertex.gem": {
                "uri": sim.url,
                "project": "sim-project",
                "model": "gemini-2.5-flash",
                "credentials_file": str(credentials),
            }
        }
    )
    async with client(cfg) as c:
        stream = c.stream("hello")
        events = [e async for e in stream]
        reply = stream.response
    assert isinstance(events[-1], Final) and reply.text
    log = sim.log
    assert log[0].protocol == "vertex-gemini" and log[0].path.endswith(
        "/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent"
    )


async def test_a_vertex_profile_without_credentials_moves_on_naming_what_it_looked_for(sim: Simulator) -> None:
    """No credentials anywhere: the Vertex entry fails fast with a typed attempt, and the walk goes on."""
    cfg = config(
        {
            "vertex.main": {"uri": sim.url, "project": "sim-project", "model": MODEL, "fallback": ["anthropic.main"]},
            "anthropic.main": {"uri": sim.url, "api_key": KEY, "model": MODEL},
        },
        retries=0,
    )
    async with client(cfg) as c:
        reply = await c.chat("hello")
    assert reply.served.provider == "anthropic.main"
    failed = reply.attempts[0]
    assert (failed.provider, failed.outcome, failed.status) == ("vertex.main", "non_retryable", None)
    assert [e.model for e in sim.log] == [MODEL]  # nothing reached the Vertex route


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_document_fails_over_from_anthropic_to_bedrock(sim: Simulator, tmp_path: Path, streamed: bool) -> None:
    """A caller's Anthropic body with a document: Anthropic overloaded, Bedrock is sent it as a Converse document."""
    notes = "Revenue grew four percent and costs stayed flat."
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "title": "q3",
                        "source": {"type": "text", "media_type": "text/plain", "data": notes},
                    },
                    {"type": "text", "text": "Summarise."},
                ],
            }
        ],
    }
    native = NativeRequest(protocol="anthropic", body=body, documents=("messages[0].content[0] (document)",))
    sim.set_script({"models": {MODEL: {"steps": ["529"]}}})
    async with client(chain(sim, tmp_path)) as c:
        if streamed:
            stream = c.stream("Summarise.", native=native)
            events = [e async for e in stream]
            assert isinstance(events[-1], Final)
            reply = stream.response
        else:
            reply = await c.chat("Summarise.", native=native)
    assert trail(reply.attempts) == [("anthropic.main", MODEL, "retryable", 529), ("bedrock.main", MODEL, "ok", None)]
    served = sim.log[-1].usage
    assert served is not None and served.input == len(notes.split()) + 1  # the simulator counted the document's words
