"""Structured output in the simulator: a JSON value that satisfies the schema a request asks for.

Each protocol codec reads the request's structured-output field in its own native form (OpenAI
``response_format``, Responses ``text.format``, Anthropic ``output_config.format``, Gemini
``responseSchema`` / ``responseJsonSchema``, Ollama ``format``) into :attr:`Parsed.schema`; an answer that
would carry the default text then carries :func:`instance` of that schema instead, so a client that parses
the answer against its schema succeeds exactly when the request reached the upstream in a form it
understood.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from turnout.sim.behaviour import DEFAULT_TEXT, Content, split_units

#: What a request without a schema (``json_object``, Ollama ``"json"``) gets: any JSON object.
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
_MAX_DEPTH = 16
_SAMPLES: Mapping[str, Any] = {"string": "text", "integer": 1, "number": 1.5, "boolean": True, "null": None}


def instance(schema: Any, defs: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """A small value valid against ``schema`` (objects get their required properties, arrays one item)."""
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return {}
    defs = defs if defs is not None else {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return instance(defs.get(ref.rsplit("/", 1)[1], {}), defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return instance(options[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "array":
        least = schema.get("minItems")
        count = least if isinstance(least, int) and 0 < least <= 4 else 1
        return [instance(schema.get("items", {}), defs, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        required = schema.get("required")
        names = required if isinstance(required, list) else list(props)
        return {name: instance(props.get(name, {}), defs, depth + 1) for name in names if isinstance(name, str)}
    if isinstance(kind, str) and kind in _SAMPLES:
        return _SAMPLES[kind]
    return {}


def answer_text(schema: Any) -> str:
    """The answer text for a structured-output request: the instance as JSON, spaced so it streams in words."""
    return orjson.dumps(instance(schema), option=orjson.OPT_INDENT_2).decode()


def structured(content: Content, schema: Any) -> Content:
    """``content`` answering a structured-output request: the schema's instance instead of the default text.

    A step that scripts its own text, tool calls or a refusal keeps them (a test may want a wrong answer).
    """
    if schema is None or content.full_text != DEFAULT_TEXT or content.tool_calls or content.refusal:
        return content
    return replace(content, text=split_units(answer_text(schema)))


# --- each protocol's structured-output field --------------------------------------------------------


def chat_schema(fmt: Any) -> Any:
    """OpenAI chat ``response_format``."""
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_object":
        return ANY_OBJECT
    spec = fmt.get("json_schema")
    if fmt.get("type") == "json_schema" and isinstance(spec, Mapping):
        return spec.get("schema") or ANY_OBJECT
    return None


def responses_schema(text: Any) -> Any:
    """Responses ``text.format``."""
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_object":
        return ANY_OBJECT
    return (fmt.get("schema") or ANY_OBJECT) if fmt.get("type") == "json_schema" else None


def anthropic_schema(payload: Mapping[str, Any]) -> Any:
    """Anthropic ``output_config.format`` (or the beta's top-level ``output_format``)."""
    config = payload.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    fmt = fmt if isinstance(fmt, Mapping) else payload.get("output_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return fmt.get("schema") or ANY_OBJECT
    return None


def gemini_schema(config: Any) -> Any:
    """Gemini ``generationConfig.responseSchema`` / ``responseJsonSchema`` with a JSON MIME type."""
    if not isinstance(config, Mapping) or config.get("responseMimeType") != "application/json":
        return None
    return _lowercase_types(config.get("responseJsonSchema") or config.get("responseSchema") or ANY_OBJECT)


def ollama_schema(fmt: Any) -> Any:
    """Ollama ``format``: a schema, or ``"json"``."""
    if fmt == "json":
        return ANY_OBJECT
    return fmt if isinstance(fmt, Mapping) else None


def _lowercase_types(schema: Any) -> Any:
    """Gemini's OpenAPI schemas may spell types in capitals (``OBJECT``)."""
    if isinstance(schema, Mapping):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lowercase_types(v)) for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lowercase_types(v) for v in schema]
    return schema
