"""Structured output in each upstream's native form: one :class:`~turnout.core.types.ResponseFormat`, five shapes.

=================  ===========================================================================
protocol           request field
=================  ===========================================================================
OpenAI Chat        ``response_format``: ``{"type": "json_schema", "json_schema": {name, schema, strict}}``
                   or ``{"type": "json_object"}``
OpenAI Responses   ``text.format``: ``{"type": "json_schema", name, schema, strict}`` or ``json_object``
Anthropic          ``output_config.format``: ``{"type": "json_schema", "schema"}`` (``json_object``: any object)
Gemini             ``generationConfig.responseMimeType = "application/json"`` and ``responseSchema`` (the
                   schema with its local ``$ref`` inlined and trimmed to Gemini's OpenAPI subset)
Ollama             ``format``: the schema, or ``"json"``
=================  ===========================================================================

Every adapter answers the JSON as the answer's text, so every surface returns it as its own text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.core.tools import gemini_schema
from turnout.core.types import ResponseFormat

_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
_MAX_REF_DEPTH = 32


def openai_chat(body: dict[str, Any], fmt: ResponseFormat) -> None:
    """Set Chat Completions' ``response_format``."""
    if fmt.kind == "json_object":
        body["response_format"] = {"type": "json_object"}
        return
    spec: dict[str, Any] = {"name": fmt.name, "schema": dict(fmt.schema or _ANY_OBJECT), "strict": fmt.strict}
    if fmt.description:
        spec["description"] = fmt.description
    body["response_format"] = {"type": "json_schema", "json_schema": spec}


def openai_responses(body: dict[str, Any], fmt: ResponseFormat) -> None:
    """Set the Responses API's ``text.format``."""
    text = dict(body.get("text") or {})
    if fmt.kind == "json_object":
        text["format"] = {"type": "json_object"}
    else:
        spec: dict[str, Any] = {
            "type": "json_schema",
            "name": fmt.name,
            "schema": dict(fmt.schema or _ANY_OBJECT),
            "strict": fmt.strict,
        }
        if fmt.description:
            spec["description"] = fmt.description
        text["format"] = spec
    body["text"] = text


def anthropic(body: dict[str, Any], fmt: ResponseFormat) -> None:
    """Set the Messages API's ``output_config.format``."""
    config = dict(body.get("output_config") or {})
    config["format"] = {"type": "json_schema", "schema": dict(fmt.schema or _ANY_OBJECT)}
    body["output_config"] = config


def gemini(config: dict[str, Any], fmt: ResponseFormat) -> None:
    """Set ``responseMimeType`` and ``responseSchema`` on a ``generationConfig``."""
    config["responseMimeType"] = "application/json"
    if fmt.kind == "json_schema" and fmt.schema:
        config["responseSchema"] = gemini_schema(inline_refs(fmt.schema))


def ollama(body: dict[str, Any], fmt: ResponseFormat) -> None:
    """Set Ollama's ``format``."""
    body["format"] = dict(fmt.schema) if fmt.kind == "json_schema" and fmt.schema else "json"


def inline_refs(schema: Mapping[str, Any]) -> Any:
    """The schema with its local ``#/$defs/…`` (and ``#/definitions/…``) references replaced by their targets.

    Pydantic and zod put nested models in ``$defs``; Gemini's schema has no references. A recursive model
    cannot be inlined: past a bounded depth its reference becomes an unconstrained object.
    """
    defs = {**dict(schema.get("definitions") or {}), **dict(schema.get("$defs") or {})}

    def walk(node: Any, depth: int) -> Any:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
                target = defs.get(ref.rsplit("/", 1)[1])
                if target is None or depth >= _MAX_REF_DEPTH:
                    return {"type": "object"}
                merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
                return walk(merged, depth + 1)
            return {k: walk(v, depth) for k, v in node.items() if k not in ("$defs", "definitions")}
        if isinstance(node, list):
            return [walk(v, depth) for v in node]
        return node

    return walk(schema, 0)
