"""Documents on the Anthropic surface reach Bedrock as Converse document blocks, and Vertex as they came."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
from gateway_support import gateway, post
from test_gateway_vertex import BEDROCK_ID, MODEL, VERTEX_ID, toml

from turnout.sim import Simulator

NOTES = "The quarterly revenue grew by four percent while costs stayed flat across every region we track."
TEXT_DOCUMENT = {
    "type": "document",
    "title": "notes/q3.txt",
    "source": {"type": "text", "media_type": "text/plain", "data": NOTES},
    "cache_control": {"type": "ephemeral"},
}
PDF_DOCUMENT = {
    "type": "document",
    "title": "notes/q3.txt",  # the same title: Bedrock needs the names apart
    "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(b"%PDF-1.4 x").decode()},
}
URL_DOCUMENT = {"type": "document", "source": {"type": "url", "url": "https://example.invalid/q3.pdf"}}


def body(*documents: Any, streamed: bool = False) -> dict[str, Any]:
    content = [*documents, {"type": "text", "text": "Summarise both."}]
    return {"model": "", "max_tokens": 100, "messages": [{"role": "user", "content": content}], "stream": streamed}


@pytest.mark.parametrize("streamed", [False, True])
async def test_documents_fail_over_from_anthropic_to_bedrock(sim: Simulator, tmp_path: Path, streamed: bool) -> None:
    """Anthropic overloaded: Bedrock serves a text and a PDF document (one title twice), not Vertex after it."""
    sim.set_script({"models": {MODEL: {"steps": ["529"]}}})
    async with gateway(toml(sim, tmp_path)) as server:
        got = await post(server, "/v1/messages", body(TEXT_DOCUMENT, PDF_DOCUMENT, streamed=streamed))
    assert got.status == 200, got.body
    assert got.headers["x-turnout-provider"] == "bedrock.main"
    assert [(e.model, e.outcome) for e in sim.log] == [(MODEL, "status:529"), (BEDROCK_ID, "ok")]
    # the simulator refuses a document Bedrock would refuse, and counts the text document's words as input
    served = sim.log[-1].usage
    assert served is not None and served.input == len(NOTES.split()) + 2
    if not streamed:
        assert orjson.loads(got.body)["usage"]["input_tokens"] == len(NOTES.split()) + 2


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_document_bedrock_cannot_take_skips_it_for_vertex(
    sim: Simulator, tmp_path: Path, streamed: bool
) -> None:
    """A document by URL has no Converse form: Bedrock is skipped, and Vertex gets the body as it came."""
    sim.set_script({"models": {MODEL: {"steps": ["529"]}}})
    async with gateway(toml(sim, tmp_path)) as server:
        got = await post(server, "/v1/messages", body(URL_DOCUMENT, TEXT_DOCUMENT, streamed=streamed))
    assert got.status == 200, got.body
    assert got.headers["x-turnout-provider"] == "vertex.main"
    assert [(e.model, e.outcome) for e in sim.log] == [(MODEL, "status:529"), (VERTEX_ID, "ok")]


async def test_a_route_of_bedrock_alone_refuses_a_url_document_before_any_call(sim: Simulator, tmp_path: Path) -> None:
    """No entry can carry the URL document: a 400 naming it, and nothing sent upstream."""
    cfg = toml(sim, tmp_path).replace('default_provider = "anthropic.main"', 'default_provider = "bedrock.main"')
    cfg = cfg.replace('fallback = ["vertex.main"]', "fallback = []")
    async with gateway(cfg) as server:
        got = await post(server, "/v1/messages", body(URL_DOCUMENT))
    assert got.status == 400, got.body
    message = orjson.loads(got.body)["error"]["message"]
    assert "messages[0].content[0] (document)" in message
    assert sim.log == []
