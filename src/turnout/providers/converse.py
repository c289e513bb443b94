"""Requests in AWS Bedrock's Converse shape: from Turnout's neutral request, or from a caller's Anthropic body.

The shapes are botocore's ``bedrock-runtime`` model (``ConverseRequest``): ``system`` blocks, ``messages`` of
content blocks (``text``, ``image``, ``document``, ``toolUse``, ``toolResult``, ``reasoningContent``,
``cachePoint``), ``inferenceConfig`` (``maxTokens``, ``temperature``, ``topP``, ``stopSequences``),
``toolConfig`` and ``additionalModelRequestFields`` (Claude's ``thinking``). Blobs travel as base64 text.

An Anthropic Messages body (the gateway's Anthropic surface) keeps its meaning: ``cache_control`` becomes a
``cachePoint`` block after the block it marked, documents become ``document`` blocks, ``thinking`` goes to
``additionalModelRequestFields``. Thinking blocks in its history were signed by Anthropic, not by Bedrock: they
are left out. Reasoning blocks Bedrock itself returned are kept with the tool calls that followed them
(``ToolCall.extra["bedrock_reasoning"]``) and sent back before those calls, on Bedrock only.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from turnout.core.types import ChatRequest, ImagePart, Message, TextPart, ToolSpec

#: ``ToolCall.extra`` key of the reasoning blocks (text and Bedrock's signature) that preceded a turn's calls.
REASONING_KEY = "bedrock_reasoning"
#: A cache point, as Converse spells ``cache_control: {"type": "ephemeral"}``.
CACHE_POINT: Mapping[str, Any] = {"cachePoint": {"type": "default"}}
#: Image formats Converse takes, by MIME type.
IMAGE_FORMATS: Mapping[str, str] = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
#: Document formats Converse takes, by MIME type.
DOCUMENT_FORMATS: Mapping[str, str] = {
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/csv": "csv",
    "text/html": "html",
    "text/markdown": "md",
}
_TOOL_CHOICE: Mapping[str, Mapping[str, Any]] = {"auto": {"auto": {}}, "required": {"any": {}}, "any": {"any": {}}}
# Converse allows letters, digits, whitespace (never two in a row), hyphens, parentheses and square brackets in a
# document's name (botocore's ``DocumentBlock.name``, 1 to 200 characters), and no two documents of a request alike.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9()\[\]-]+")
_NAME_MAX = 200


class Untranslatable(ValueError):
    """Something in the request has no Converse form (a remote image URL): raised before anything is sent."""


def _text(text: str) -> list[dict[str, Any]]:
    # Converse refuses blank text blocks
    return [{"text": text}] if text and not text.isspace() else []


def _image(media_type: str | None, data: str) -> dict[str, Any]:
    fmt = IMAGE_FORMATS.get((media_type or "").lower())
    if fmt is None:
        raise Untranslatable(f"Bedrock Converse takes png, jpeg, gif or webp images, not {str(media_type)[:40]!r}")
    return {"image": {"format": fmt, "source": {"bytes": data}}}


def image_block(part: ImagePart) -> dict[str, Any]:
    """An ``image`` block for an inline image (Converse takes bytes, never a URL)."""
    if not part.is_data_url:
        raise Untranslatable(
            "Bedrock Converse accepts only inline images (data: URLs with base64 data), not image URLs"
        )
    return _image(part.media_type, part.data or "")


def converse_body(
    request: ChatRequest,
    *,
    max_tokens: int | None,
    temperature: float | None,
    merge_system_into_user: bool = False,
    native_tools: bool = True,
) -> dict[str, Any]:
    """The Converse body (without the model, which goes in the URL) for a neutral request.

    Raises:
        Untranslatable: The request holds what Converse cannot carry.
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    has_tool_blocks = False
    for m in request.messages:
        if m.role == "system":
            if m.text:
                system.append(m.text)
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _assistant_blocks(m) if role == "assistant" else _user_blocks(m)
        has_tool_blocks = has_tool_blocks or bool(m.tool_calls) or m.role == "tool"
        _append(messages, role, blocks)
    body: dict[str, Any] = {}
    joined = "\n\n".join(system)
    if joined and merge_system_into_user:
        _lead_user(messages, joined)
    elif joined:
        body["system"] = [{"text": joined}]
    body["messages"] = messages
    config = _inference(max_tokens, temperature, None, request.stop)
    if config:
        body["inferenceConfig"] = config
    if request.tools and native_tools and (request.tool_choice != "none" or has_tool_blocks):
        body["toolConfig"] = _tool_config(request.tools, request.tool_choice)
    return body


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add a turn's blocks, joining consecutive turns of one role (Converse needs them alternating)."""
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _lead_user(messages: list[dict[str, Any]], text: str) -> None:
    for msg in messages:
        if msg["role"] == "user":
            msg["content"].insert(0, {"text": text})
            return
    messages.insert(0, {"role": "user", "content": [{"text": text}]})


def _inference(
    max_tokens: int | None, temperature: float | None, top_p: float | None, stop: Sequence[str]
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if max_tokens is not None:
        config["maxTokens"] = max_tokens
    if temperature is not None:
        config["temperature"] = temperature
    if top_p is not None:
        config["topP"] = top_p
    if stop:
        config["stopSequences"] = list(stop)
    return config


def _tool_spec(name: str, description: str, schema: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "inputSchema": {"json": schema or {"type": "object", "properties": {}}}}
    if description:
        spec["description"] = description
    return {"toolSpec": spec}


def _tool_config(tools: Sequence[ToolSpec], choice: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"tools": [_tool_spec(t.name, t.description, dict(t.parameters)) for t in tools]}
    if choice and choice != "none":
        config["toolChoice"] = _TOOL_CHOICE.get(choice) or {"tool": {"name": choice}}
    return config


def _user_blocks(m: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in m.parts:
        if isinstance(part, TextPart):
            blocks += _text(part.text)
        else:
            blocks.append(image_block(part))
    if m.role != "tool":
        return blocks
    # a tool result: its text and images make one toolResult block
    content = blocks or [{"text": m.text or " "}]
    return [{"toolResult": {"toolUseId": m.tool_call_id or "", "content": content}}]


def _arguments(text: str) -> Any:
    try:
        args = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return args if isinstance(args, dict) else {}


def _assistant_blocks(m: Message) -> list[dict[str, Any]]:
    # reasoning Bedrock returned before these calls goes first, as Claude requires with thinking on
    blocks: list[dict[str, Any]] = [dict(b) for c in m.tool_calls if c.extra for b in c.extra.get(REASONING_KEY, ())]
    blocks += _text(m.text)
    blocks += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": _arguments(c.arguments)}} for c in m.tool_calls]
    return blocks


# --- an Anthropic Messages body ---------------------------------------------------------------------


def from_anthropic(body: Mapping[str, Any], *, max_tokens: int | None, temperature: float | None) -> dict[str, Any]:
    """The Converse body for a caller's Anthropic Messages body (its model and stream flag are the URL's).

    Raises:
        Untranslatable: A block Converse cannot carry (an image by URL).
    """
    out: dict[str, Any] = {}
    system = _anthropic_system(body.get("system"))
    messages: list[dict[str, Any]] = []
    names: set[str] = set()  # the request's document names, each used once
    for m in body.get("messages") or ():
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role == "system":  # a system turn between others, as native_body folds them
            system += _anthropic_system(m.get("content"))
            continue
        _append(messages, "assistant" if role == "assistant" else "user", _anthropic_blocks(m.get("content"), names))
    if system:
        out["system"] = system
    out["messages"] = messages
    given = body.get("max_tokens")
    temp = body.get("temperature")
    top_p = body.get("top_p")
    config = _inference(
        given if isinstance(given, int) and not isinstance(given, bool) else max_tokens,
        temp if isinstance(temp, int | float) and not isinstance(temp, bool) else temperature,
        top_p if isinstance(top_p, int | float) and not isinstance(top_p, bool) else None,
        [s for s in body.get("stop_sequences") or () if isinstance(s, str)],
    )
    if config:
        out["inferenceConfig"] = config
    tools = _anthropic_tools(body.get("tools"))
    choice = body.get("tool_choice")
    if tools and not (isinstance(choice, Mapping) and choice.get("type") == "none"):
        out["toolConfig"] = {"tools": tools}
        if isinstance(choice, Mapping) and choice.get("type") in ("auto", "any"):
            out["toolConfig"]["toolChoice"] = {choice["type"]: {}}
        elif isinstance(choice, Mapping) and choice.get("type") == "tool" and isinstance(choice.get("name"), str):
            out["toolConfig"]["toolChoice"] = {"tool": {"name": choice["name"]}}
    extra: dict[str, Any] = {}
    if isinstance(body.get("thinking"), Mapping):
        extra["thinking"] = dict(body["thinking"])
    if isinstance(body.get("top_k"), int) and not isinstance(body.get("top_k"), bool):
        extra["top_k"] = body["top_k"]
    if extra:
        out["additionalModelRequestFields"] = extra
    return out


def _cached(block: Mapping[str, Any], converted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``converted``, followed by a cache point when the Anthropic block carried ``cache_control``."""
    if converted and isinstance(block.get("cache_control"), Mapping):
        return [*converted, dict(CACHE_POINT)]
    return converted


def _anthropic_system(system: Any) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return _text(system)
    out: list[dict[str, Any]] = []
    for block in system if isinstance(system, list) else ():
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            out += _cached(block, _text(block["text"]))
    return out


def _anthropic_blocks(content: Any, names: set[str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text(content)
    out: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, Mapping):
            out += _cached(block, _anthropic_block(block, names))
    return out


def _anthropic_block(block: Mapping[str, Any], names: set[str]) -> list[dict[str, Any]]:
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return _text(block["text"])
    if kind == "image":
        return [_anthropic_image(block.get("source"))]
    if kind == "document":
        return [_document(block, names)]
    if kind == "tool_use":
        args = block.get("input")
        return [
            {
                "toolUse": {
                    "toolUseId": str(block.get("id") or ""),
                    "name": str(block.get("name") or ""),
                    "input": args if isinstance(args, Mapping) else {},
                }
            }
        ]
    if kind == "tool_result":
        inner = block.get("content")
        parts = _text(inner) if isinstance(inner, str) else _anthropic_blocks(inner, names)
        result: dict[str, Any] = {
            "toolUseId": str(block.get("tool_use_id") or ""),
            "content": [p for p in parts if "cachePoint" not in p] or [{"text": " "}],
        }
        if block.get("is_error") is True:
            result["status"] = "error"
        return [{"toolResult": result}]
    # thinking and redacted_thinking were signed by Anthropic: another provider refuses them, so they stay out;
    # server-tool blocks have no Converse form
    return []


def _anthropic_image(source: Any) -> dict[str, Any]:
    if isinstance(source, Mapping) and source.get("type") == "base64" and isinstance(source.get("data"), str):
        return _image(source.get("media_type"), source["data"])
    raise Untranslatable("Bedrock Converse accepts only base64 images, not image URLs")


def document_format(block: Mapping[str, Any]) -> str | None:
    """The Converse ``format`` of an Anthropic ``document`` block Converse can carry (None: it cannot).

    Converse takes a document's bytes: an Anthropic ``base64`` source of a format it knows (PDF above all) or a
    plain ``text`` source. A document by URL, by file id or made of content blocks has no Converse form.
    """
    source = block.get("source")
    if not isinstance(source, Mapping) or not isinstance(source.get("data"), str):
        return None
    kind = source.get("type")
    if kind == "base64":
        media_type = source.get("media_type")
        return DOCUMENT_FORMATS.get(media_type.lower()) if isinstance(media_type, str) else None
    return "txt" if kind == "text" else None


def document_name(title: Any, used: set[str]) -> str:
    """A name for a document Converse accepts, unlike every name in ``used`` (which it joins).

    The title's runs of other characters become one space; no title (or nothing left of it) names the document
    by its number in the request; a name already used gets `` (2)``, `` (3)``, … within the 200 characters.
    """
    base = " ".join(_NAME_UNSAFE.sub(" ", title).split()) if isinstance(title, str) else ""
    base = base[:_NAME_MAX] or f"document {len(used) + 1}"
    name, n = base, 1
    while name in used:
        n += 1
        suffix = f" ({n})"
        name = base[: _NAME_MAX - len(suffix)].rstrip() + suffix
    used.add(name)
    return name


def _document(block: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    """A Converse ``document`` block: its format, a name unique in the request, and its bytes (base64 text).

    Citations are not asked for: Converse answers them in blocks of its own that the answer would not carry.
    """
    fmt = document_format(block)
    source = block.get("source")
    if fmt is None or not isinstance(source, Mapping):
        raise Untranslatable(
            "Bedrock Converse takes documents as base64 data (PDF, CSV, HTML, Markdown, text) or plain text, "
            "not by URL, file id or content blocks"
        )
    data = source["data"]
    if source.get("type") == "text":
        data = base64.b64encode(data.encode("utf-8", "replace")).decode("ascii")
    doc: dict[str, Any] = {"format": fmt, "name": document_name(block.get("title"), names), "source": {"bytes": data}}
    if isinstance(block.get("context"), str) and block["context"]:
        doc["context"] = block["context"]
    return {"document": doc}


def _anthropic_tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping) or tool.get("type") not in (None, "custom"):
            continue  # Anthropic-defined and server tools have no Converse form
        name = tool.get("name")
        if not isinstance(name, str):
            continue
        description = tool.get("description")
        spec = _tool_spec(name, description if isinstance(description, str) else "", tool.get("input_schema"))
        out += _cached(tool, [spec])
    return out
