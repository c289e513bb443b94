"""What the public API accepts: a call's arguments and options, checked before any attempt.

The one owner of the caller's side of a request. :func:`request_of` builds the
:class:`~turnout.core.types.ChatRequest` of a call of :class:`~turnout.client.Client` from its arguments and
raises :class:`~turnout.core.errors.InvalidRequest`, naming the argument, for anything that could not be sent:
a wrong type, a tool schema that is not an object, an option out of range, or a JSON value the encoder
refuses (nested deeper than :data:`MAX_JSON_DEPTH` levels, an integer beyond 64 bits). Such a call never
reaches the walk, so it is never retried, never routed around, and never changes shared state.

The gateway bounds the nesting of the bodies it accepts with the same :func:`too_deep` (``gateway/bounds.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from turnout.core.errors import InvalidRequest
from turnout.core.types import (
    ArgumentError,
    ChatRequest,
    Message,
    NativeRequest,
    ResponseFormat,
    ToolSpec,
    coerce_messages,
    coerce_tools,
)

#: How deeply a caller's JSON value (a tool's schema, a response format's schema, a gateway body) may nest
#: arrays and objects. The encoder stops at 254 levels; a value is sent inside a wire body a few levels deep,
#: and a real schema needs far fewer than this.
MAX_JSON_DEPTH = 128

#: ``tool_choice`` words every protocol understands; anything else names a tool.
TOOL_CHOICE_WORDS = frozenset(("auto", "none", "required"))

_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def too_deep(encoded: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``encoded`` nests arrays and objects deeper than ``limit`` levels.

    A text with no more brackets than ``limit`` (nearly every one) cannot nest deeper, so counting them answers;
    another is parsed, and its arrays and objects are followed level by level (a bracket inside a string is text).

    Raises:
        orjson.JSONDecodeError: ``encoded`` is not JSON.
    """
    if encoded.count(b"[") + encoded.count(b"{") <= limit:
        return False
    level = _containers([orjson.loads(encoded)])  # the arrays and objects one level deep
    for _ in range(limit):
        level = _containers(inner for outer in level for inner in _members(outer))
    return bool(level)


def _containers(values: Iterable[object]) -> list[object]:
    """The arrays and objects among ``values``."""
    return [value for value in values if isinstance(value, dict | list)]


def _members(value: object) -> Iterable[object]:
    """The values an array or object holds (a scalar holds none)."""
    if isinstance(value, dict):
        return value.values()
    return value if isinstance(value, list) else ()


def check_json(value: object, path: str) -> None:
    """``value`` can be sent as JSON: the encoder takes it, and it nests at most :data:`MAX_JSON_DEPTH` levels.

    Raises:
        InvalidRequest: Naming ``path``: an integer beyond 64 bits, a value of no JSON type, a key that is not a
            string, or nesting too deep.
    """
    try:
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        if "recursion" in str(exc).lower():
            raise InvalidRequest(f"is nested deeper than {MAX_JSON_DEPTH} levels", path=path) from None
        # orjson's reason names a type or a limit, never the value ("Integer exceeds 64-bit range")
        raise InvalidRequest(f"cannot be encoded as JSON ({str(exc)[:120]})", path=path) from None
    if too_deep(encoded):
        raise InvalidRequest(f"is nested deeper than {MAX_JSON_DEPTH} levels", path=path)


def check_options(temperature: object, max_tokens: object) -> None:
    """``temperature`` is a finite number of at least 0 and ``max_tokens`` a positive integer (each None: unset).

    Raises:
        InvalidRequest: Naming the option.
    """
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise InvalidRequest(f"must be a number, not {type(temperature).__name__}", path="temperature")
        if not math.isfinite(temperature) or temperature < 0:
            raise InvalidRequest("must be a finite number of at least 0", path="temperature")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise InvalidRequest(f"must be an integer, not {type(max_tokens).__name__}", path="max_tokens")
        if max_tokens < 1:
            raise InvalidRequest("must be at least 1", path="max_tokens")


def cache_key_of(value: object) -> str | None:
    """``cache_key``: the caller's name for the conversation, a non-empty string (None: not given).

    Raises:
        ArgumentError: Naming ``cache_key``.
    """
    if value is None or (isinstance(value, str) and value):
        return value
    raise ArgumentError("cache_key", "must be a non-empty string (the conversation's name)")


def response_format_of(value: object) -> ResponseFormat | None:
    """Structured output from a :class:`ResponseFormat` or the OpenAI ``response_format`` dict.

    Accepted dicts: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}``,
    ``{"type": "json_object"}`` and ``{"type": "text"}`` (plain text: no structured output).

    Raises:
        InvalidRequest: Naming the field at fault (``response_format.json_schema.schema``).
    """
    if value is None:
        return None
    if isinstance(value, ResponseFormat):
        fmt = value
    elif isinstance(value, Mapping):
        fmt_or_none = _format_from_dict(value)
        if fmt_or_none is None:
            return None
        fmt = fmt_or_none
    else:
        raise InvalidRequest(
            f"must be a ResponseFormat or an OpenAI response_format dict, not {type(value).__name__}",
            path="response_format",
        )
    _check_format(fmt)
    return fmt


def _format_from_dict(value: Mapping[str, Any]) -> ResponseFormat | None:
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(kind="json_object")
    if kind != "json_schema":
        raise InvalidRequest("must be json_schema, json_object or text", path="response_format.type")
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping):
        raise InvalidRequest("must be a dict holding the schema", path="response_format.json_schema")
    name = spec.get("name", "response")
    strict = spec.get("strict", False)
    if not isinstance(strict, bool):
        raise InvalidRequest("must be true or false", path="response_format.json_schema.strict")
    description = spec.get("description")
    if not isinstance(name, str) or (description is not None and not isinstance(description, str)):
        field = "name" if not isinstance(name, str) else "description"
        raise InvalidRequest("must be a string", path=f"response_format.json_schema.{field}")
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, Mapping):
        raise InvalidRequest(
            f"must be a JSON Schema object (a dict), not {type(schema).__name__}",
            path="response_format.json_schema.schema",
        )
    return ResponseFormat(kind="json_schema", schema=schema, name=name, description=description, strict=strict)


def _check_format(fmt: ResponseFormat) -> None:
    if fmt.kind not in ("json_schema", "json_object"):
        raise InvalidRequest("must be json_schema or json_object", path="response_format.kind")
    if fmt.schema is not None:
        if not isinstance(fmt.schema, Mapping):
            raise InvalidRequest(
                f"must be a JSON Schema object (a dict), not {type(fmt.schema).__name__}",
                path="response_format.schema",
            )
        check_json(fmt.schema, "response_format.schema")
    if not isinstance(fmt.name, str) or not _SCHEMA_NAME.fullmatch(fmt.name):
        raise InvalidRequest("must be 1 to 64 of A-Z, a-z, 0-9, _ and -", path="response_format.name")
    if fmt.description is not None and not isinstance(fmt.description, str):
        raise InvalidRequest("must be a string", path="response_format.description")
    if not isinstance(fmt.strict, bool):
        raise InvalidRequest("must be true or false", path="response_format.strict")


def tool_choice_of(value: object, tools: tuple[ToolSpec, ...], native: NativeRequest | None) -> str | None:
    """``tool_choice`` as Turnout carries it: ``auto``, ``none``, ``required`` or the name of one of ``tools``.

    The OpenAI dict ``{"type": "function", "function": {"name": ...}}`` names a tool too. A name is checked
    against ``tools`` unless the request carries its own wire body (its tools may be ones Turnout does not model).

    Raises:
        InvalidRequest: Naming ``tool_choice``.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        fn = value.get("function")
        name = fn.get("name") if value.get("type") == "function" and isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            raise InvalidRequest(
                'must be auto, none, required, a tool name or {"type": "function", "function": {"name": ...}}',
                path="tool_choice",
            )
        value = name
    if not isinstance(value, str):
        raise InvalidRequest(f"must be a string, not {type(value).__name__}", path="tool_choice")
    if value in TOOL_CHOICE_WORDS:
        if value == "required" and not tools and native is None:
            raise InvalidRequest("is required, but the request has no tools", path="tool_choice")
        return value
    if native is None and not any(t.name == value for t in tools):
        raise InvalidRequest(
            "must be auto, none, required or the name of one of the request's tools", path="tool_choice"
        )
    return value


def messages_of(messages: Iterable[Message | Mapping[str, Any]] | str) -> tuple[Message, ...]:
    """Messages in any accepted form (see :func:`~turnout.core.types.coerce_messages`), checked.

    Raises:
        InvalidRequest: A message the types cannot take; ``.path`` names it (``messages[2].role``).
    """
    try:
        return coerce_messages(messages)
    except ArgumentError as exc:
        raise InvalidRequest(exc.reason, path=exc.path) from None


def request_of(
    messages: Iterable[Message | Mapping[str, Any]] | str,
    *,
    tools: Iterable[ToolSpec | Mapping[str, Any]] | None = None,
    temperature: object = None,
    max_tokens: object = None,
    tool_choice: object = None,
    response_format: object = None,
    native: NativeRequest | None = None,
    cache_key: object = None,
) -> ChatRequest:
    """The request of one call, every argument checked (see the module's docstring).

    Raises:
        InvalidRequest: An argument cannot be sent; ``.path`` names it (``tools[0].function.parameters``).
    """
    try:
        raw_tools = tools if tools is None or type(tools) is tuple or type(tools) is list else _listed(tools)
        specs = coerce_tools(raw_tools) if raw_tools else ()
        fmt = response_format_of(response_format)
        check_options(temperature, max_tokens)
        name = cache_key_of(cache_key)
        for i, tool in enumerate(specs):
            check_json(tool.parameters, _schema_path(raw_tools, i))  # type: ignore[arg-type]  # not empty here
        return ChatRequest.of(
            messages,
            tools=specs,
            max_tokens=max_tokens,  # type: ignore[arg-type]  # checked above
            tool_choice=tool_choice_of(tool_choice, specs, native),
            response_format=fmt,
            native=native,
            cache_key=name,
        )
    except ArgumentError as exc:
        raise InvalidRequest(exc.reason, path=exc.path) from None


def _listed(tools: object) -> list[Any]:
    """``tools`` as a list, when it is a collection of tools (a dict or a string is not)."""
    if isinstance(tools, str | Mapping | ToolSpec) or not isinstance(tools, Iterable):
        raise InvalidRequest("must be a list of tools (ToolSpec objects or OpenAI-style dicts)", path="tools")
    return list(tools)


def _schema_path(raw: list[Any] | tuple[Any, ...], i: int) -> str:
    """Where tool ``i``'s schema is in the caller's own form (``tools[0].function.parameters``)."""
    tool = raw[i]
    if isinstance(tool, ToolSpec):
        return f"tools[{i}].parameters"
    fn = tool.get("function", tool)
    key = "parameters" if fn.get("parameters") or not fn.get("input_schema") else "input_schema"
    return f"tools[{i}].function.{key}" if "function" in tool else f"tools[{i}].{key}"
