"""Anthropic documents as Bedrock Converse document blocks, checked against botocore's bedrock-runtime model."""

from __future__ import annotations

import base64
import re
from typing import Any

import botocore.session
import pytest
from botocore.model import ListShape, Shape, StructureShape
from botocore.validate import ParamValidator
from provider_kit import make_adapter

from turnout.core.errors import InvalidRequest
from turnout.core.types import ChatRequest, NativeRequest
from turnout.gateway.passthrough import split_anthropic
from turnout.providers import HttpClient
from turnout.providers.bedrock import BedrockAdapter
from turnout.providers.converse import document_name
from turnout.sim.wire.bedrock import BedrockConverse

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()
#: Bedrock's rule for a document name (botocore's DocumentBlock.name documentation), written as a pattern.
NAME = re.compile(r"(?!.*\s\s)[A-Za-z0-9\s()\[\]-]{1,200}")


@pytest.fixture
def adapter(http: HttpClient) -> BedrockAdapter:
    made = make_adapter(http, "bedrock", "http://127.0.0.1:9", region="us-east-1", api_key="bedrock-api-key-0001")
    assert isinstance(made, BedrockAdapter)
    return made


def converse(adapter: BedrockAdapter, content: list[Any]) -> dict[str, Any]:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": content}]}
    return adapter.build_body(
        ChatRequest.of("x", native=NativeRequest(protocol="anthropic", body=body)), MODEL, None, False
    )


def converse_input() -> StructureShape:
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model("Converse").input_shape
    assert isinstance(shape, StructureShape)
    return shape


def enum_problems(value: Any, shape: Shape, path: str = "") -> list[str]:
    """Values outside an enum of the model (botocore's validator does not check enums)."""
    out: list[str] = []
    enum = shape.metadata.get("enum")
    if enum and value not in enum:
        out.append(f"{path}: {value!r}")
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                out += enum_problems(value[name], member, f"{path}.{name}")
    elif isinstance(shape, ListShape) and isinstance(value, list):
        for i, item in enumerate(value):
            out += enum_problems(item, shape.member, f"{path}[{i}]")
    return out


def test_documents_are_valid_converse_blocks_with_unique_safe_names(adapter: BedrockAdapter) -> None:
    """Titles are cut to Bedrock's characters, repeated names numbered, bytes kept; botocore's model accepts it."""
    content = [
        {
            "type": "document",
            "title": "Q3: report/final.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        },
        {
            "type": "document",
            "title": "Q3 report  final pdf",
            "source": {"type": "text", "media_type": "text/plain", "data": "Sales grew."},
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "untitled"}},
        {
            "type": "document",
            "title": "***",
            "source": {"type": "text", "media_type": "text/plain", "data": "odd"},
            "context": "ctx",
        },
        {"type": "text", "text": "Compare them."},
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [
                {
                    "type": "document",
                    "title": "Q3: report/final.pdf",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                }
            ],
        },
    ]
    body = converse(adapter, content)
    blocks = body["messages"][0]["content"]
    docs = [b["document"] for b in blocks if "document" in b]
    docs.append(blocks[-1]["toolResult"]["content"][0]["document"])
    names = [d["name"] for d in docs]
    assert names == [
        "Q3 report final pdf",
        "Q3 report final pdf (2)",
        "document 3",
        "document 4",
        "Q3 report final pdf (3)",
    ]
    assert all(NAME.fullmatch(n) for n in names) and len(set(names)) == len(names)
    assert [d["format"] for d in docs] == ["pdf", "txt", "txt", "txt", "pdf"]
    assert docs[0]["source"] == {"bytes": PDF}
    assert base64.b64decode(docs[1]["source"]["bytes"]) == b"Sales grew."
    assert docs[3]["context"] == "ctx"
    # the shapes are botocore's own
    report = ParamValidator().validate({"modelId": MODEL, **body}, converse_input())
    assert not report.has_errors(), report.generate_report()
    assert enum_problems({"modelId": MODEL, **body}, converse_input()) == []
    # and the simulator, which refuses what Bedrock refuses, takes it
    assert BedrockConverse().refuse(body) is None


@pytest.mark.parametrize(
    ("title", "used", "expected"),
    [
        ("a\tb\n\nc", set(), "a b c"),
        ("x" * 300, set(), "x" * 200),
        ("x" * 200, {"x" * 200}, "x" * 196 + " (2)"),
        ("é", set(), "document 1"),
        (None, {"document 1"}, "document 2"),
        ("document 2", {"document 2", "document 2 (2)"}, "document 2 (3)"),
    ],
)
def test_document_names(title: Any, used: set[str], expected: str) -> None:
    """A name always fits Bedrock's rule and differs from those already used."""
    before = set(used)
    name = document_name(title, used)
    assert name == expected and NAME.fullmatch(name) and name not in before and name in used


@pytest.mark.parametrize(
    "source",
    [
        {"type": "url", "url": "https://example.invalid/a.pdf"},
        {"type": "file", "file_id": "file_1"},
        {"type": "content", "content": [{"type": "text", "text": "x"}]},
        {"type": "base64", "media_type": "image/tiff", "data": PDF},
    ],
)
def test_a_document_converse_cannot_carry(adapter: BedrockAdapter, source: dict[str, Any]) -> None:
    """By URL, file id or content blocks (or an unknown format): no Converse form, the entry is not a candidate."""
    block = {"type": "document", "source": source}
    with pytest.raises(InvalidRequest):
        converse(adapter, [block])
    _, only, documents = split_anthropic({"messages": [{"role": "user", "content": [block]}]})
    assert (only, documents) == (["messages[0].content[0] (document)"], [])


def test_the_split_lists_documents_bedrock_carries_apart() -> None:
    """A base64 PDF or a text document is listed among the documents, not among what only Anthropic carries."""
    content = [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        {"type": "search_result", "source": "s", "title": "t", "content": []},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
    ]
    modelled, only, documents = split_anthropic({"messages": [{"role": "user", "content": content}]})
    assert only == ["messages[0].content[1] (search_result)"]
    assert documents == ["messages[0].content[0] (document)", "messages[0].content[2] (document)"]
    assert modelled["messages"][0]["content"] == []


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"name": "a:b", "format": "pdf", "source": {"bytes": PDF}}, "alphanumeric"),
        ({"name": "a  b", "format": "pdf", "source": {"bytes": PDF}}, "consecutive whitespace"),
        ({"name": "a", "format": "tiff", "source": {"bytes": PDF}}, "format"),
        ({"name": "a", "format": "pdf", "source": {"bytes": "not base64!"}}, "base64"),
    ],
)
def test_the_simulator_refuses_documents_bedrock_refuses(doc: dict[str, Any], says: str) -> None:
    reason = BedrockConverse().refuse({"messages": [{"role": "user", "content": [{"document": doc}]}]})
    assert reason is not None and says in reason


def test_the_simulator_refuses_two_documents_of_one_name() -> None:
    doc = {"name": "same", "format": "pdf", "source": {"bytes": PDF}}
    payload = {
        "messages": [
            {"role": "user", "content": [{"document": doc}]},
            {"role": "assistant", "content": [{"text": "ok"}]},
            {"role": "user", "content": [{"document": doc}]},
        ]
    }
    reason = BedrockConverse().refuse(payload)
    assert reason is not None and "same name" in reason
