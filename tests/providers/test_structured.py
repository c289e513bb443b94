"""Structured output: each protocol's native request field, and the skip predicate of the walk."""

from __future__ import annotations

from typing import Any

from turnout.core.types import Capabilities, ChatRequest, NativeRequest, ResponseFormat, can_serve
from turnout.providers import structured
from turnout.sim.schema import instance

SCHEMA: dict[str, Any] = {
    "$defs": {"City": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    "type": "object",
    "properties": {"city": {"$ref": "#/$defs/City"}, "n": {"type": "integer"}},
    "required": ["city", "n"],
    "additionalProperties": False,
}
FMT = ResponseFormat(kind="json_schema", schema=SCHEMA, name="weather", strict=True)


def test_each_protocol_gets_its_native_field() -> None:
    """OpenAI response_format, Responses text.format, Anthropic output_config, Gemini responseSchema, Ollama format."""
    chat: dict[str, Any] = {}
    structured.openai_chat(chat, FMT)
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
    }
    responses: dict[str, Any] = {"text": {"verbosity": "low"}}
    structured.openai_responses(responses, FMT)
    assert responses["text"]["format"]["type"] == "json_schema" and responses["text"]["verbosity"] == "low"
    claude: dict[str, Any] = {"output_config": {"effort": "low"}}
    structured.anthropic(claude, FMT)
    assert claude["output_config"] == {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}}
    config: dict[str, Any] = {}
    structured.gemini(config, FMT)
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"]["properties"]["city"]["properties"]["name"] == {"type": "string"}
    assert "additionalProperties" not in config["responseSchema"]
    ollama: dict[str, Any] = {}
    structured.ollama(ollama, ResponseFormat(kind="json_object"))
    assert ollama["format"] == "json"


def test_recursive_refs_are_bounded() -> None:
    """A recursive $ref is inlined to a bounded depth, then left as an unconstrained object."""
    tree = {
        "$defs": {"N": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}},
        "$ref": "#/$defs/N",
    }
    out = structured.inline_refs(tree)
    depth = 0
    while "properties" in out:
        out = out["properties"]["kids"]["items"]
        depth += 1
    assert depth == 32 and out == {"type": "object"}


def test_can_serve_checks_structured_output_and_native_only_fields() -> None:
    """The one predicate: structured output needs the capability, an untranslatable field needs the protocol."""
    plain = ChatRequest.of("hi")
    shaped = ChatRequest.of("hi", response_format=FMT)
    native = NativeRequest(protocol="anthropic", body={}, only=("messages[0].content[0] (document)",))
    doc = ChatRequest.of("hi", native=native)
    able = Capabilities(structured_output=True, protocol="openai-chat")
    assert can_serve(Capabilities(), plain)
    assert not can_serve(Capabilities(), shaped) and can_serve(able, shaped)
    assert not can_serve(able, doc) and can_serve(Capabilities(protocol="anthropic"), doc)


def test_simulator_instance_satisfies_the_schema() -> None:
    """The simulator's structured answer follows refs, required properties and types."""
    assert instance(SCHEMA) == {"city": {"name": "text"}, "n": 1}
