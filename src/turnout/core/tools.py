"""Tool conversion: one :class:`~turnout.core.types.ToolSpec` list, four wire shapes.

Native shapes for OpenAI, Anthropic and Gemini, and prompt-guided instructions (with a parser for
the ``<tool_call>`` blocks they ask for) for models without native tool calling.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from turnout.core.types import (
    AnthropicTools,
    GeminiTools,
    OpenAITools,
    PromptGuidedTools,
    ToolCall,
    ToolSpec,
)


def openai_tools(tools: Sequence[ToolSpec]) -> OpenAITools:
    """OpenAI Chat Completions ``tools``: ``{"type": "function", "function": {...}}``."""
    return OpenAITools(
        tools=tuple(
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            }
            for t in tools
        )
    )


def anthropic_tools(tools: Sequence[ToolSpec]) -> AnthropicTools:
    """Anthropic Messages ``tools``: ``{"name", "description", "input_schema"}``."""
    return AnthropicTools(
        tools=tuple({"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools)
    )


# JSON Schema keywords Gemini's OpenAPI subset rejects.
_GEMINI_DROP = frozenset(("$schema", "additionalProperties", "$id", "$ref", "$defs", "definitions", "strict"))


def gemini_schema(schema: Any) -> Any:
    """A JSON Schema trimmed to Gemini's OpenAPI subset (the keywords it rejects removed)."""
    if isinstance(schema, dict):
        return {
            # The keys of ``properties`` are the tool's parameter names, not keywords: a parameter may be
            # called ``strict`` or ``definitions``. Only the schemas under them are trimmed.
            k: (
                {name: gemini_schema(s) for name, s in v.items()}
                if k == "properties" and isinstance(v, dict)
                else gemini_schema(v)
            )
            for k, v in schema.items()
            if k not in _GEMINI_DROP
        }
    if isinstance(schema, list):
        return [gemini_schema(v) for v in schema]
    return schema


def gemini_tools(tools: Sequence[ToolSpec]) -> GeminiTools:
    """Gemini ``functionDeclarations`` with the schema trimmed to Gemini's OpenAPI subset."""
    decls: list[dict[str, Any]] = []
    for t in tools:
        decl: dict[str, Any] = {"name": t.name, "description": t.description}
        params = gemini_schema(dict(t.parameters))
        if params.get("properties"):
            decl["parameters"] = params
        decls.append(decl)
    return GeminiTools(function_declarations=tuple(decls))


def prompt_guided_tools(tools: Sequence[ToolSpec]) -> PromptGuidedTools:
    """Instructions that teach a model without native tools to emit ``<tool_call>`` JSON blocks."""
    lines = [
        "## Tool Use Protocol",
        "",
        "You can call tools. To call one, reply with a block of this exact form, one per call:",
        "<tool_call>",
        '{"name": "<tool name>", "arguments": {<arguments as a JSON object>}}',
        "</tool_call>",
        "Tool results come back in the next message. Available tools:",
        "",
    ]
    for t in tools:
        lines.append(f"### {t.name}")
        if t.description:
            lines.append(t.description)
        lines.append("Parameters (JSON Schema): " + orjson.dumps(dict(t.parameters)).decode())
        lines.append("")
    return PromptGuidedTools(instructions="\n".join(lines).rstrip())


_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_prompt_guided_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Extract ``<tool_call>`` blocks from text; return the remaining text and the calls.

    Blocks whose JSON is invalid or lacks a name are left in the text untouched.
    """
    if "<tool_call>" not in text:
        return text, ()
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            obj = orjson.loads(match.group(1))
        except orjson.JSONDecodeError:
            return match.group(0)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return match.group(0)
        args = obj.get("arguments", {})
        calls.append(
            ToolCall(
                id=f"call_{uuid.uuid4().hex[:24]}",
                name=obj["name"],
                arguments=args if isinstance(args, str) else orjson.dumps(args).decode(),
            )
        )
        return ""

    rest = _CALL_RE.sub(take, text)
    return rest.strip() if calls else text, tuple(calls)
