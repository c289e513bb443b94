"""Same protocol, nothing lost: what a surface's body holds beyond what Turnout models.

A surface validates only what it translates. Before that, the body is split here into the part Turnout
models (validated and translated as before) and what only the surface's own protocol can carry: content
blocks, tool kinds, message roles and fields without a translation. Those are listed by their path
(``messages[1].content[0] (document)``) in :attr:`~turnout.core.types.NativeRequest.only`: an entry that speaks
the protocol receives the client's body unchanged, so they pass through; an entry speaking another protocol
cannot serve the request, and when no entry of the route can, the client gets a 400 naming them and the
route before any upstream call.

Fields that are only hints (``cache_control``, ``top_k``, ``metadata``, ``service_tier``, …) need no
translation: they pass through to a same-protocol entry and are left out for the others.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from turnout.core.types import NativeRequest
from turnout.gateway.failures import invalid
from turnout.providers.converse import document_format

#: Anthropic content blocks Turnout translates (everything else passes through or is refused).
ANTHROPIC_BLOCKS = frozenset(("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"))
#: Anthropic request fields with no translation to another protocol.
ANTHROPIC_ONLY_FIELDS = ("mcp_servers", "container")
#: OpenAI chat content parts Turnout translates.
OPENAI_PARTS = frozenset(("text", "image_url", "refusal"))
#: OpenAI chat request fields with no translation to another protocol.
OPENAI_ONLY_FIELDS = ("audio", "modalities", "prediction", "web_search_options")
#: The tool kinds each protocol's translation models (a tool without ``type`` is one of them too).
_ANTHROPIC_TOOLS = frozenset(("custom",))
_OPENAI_TOOLS = frozenset(("function",))
_BETA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(\s*,\s*[A-Za-z0-9][A-Za-z0-9._-]{0,99}){0,15}")


def anthropic_beta(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The ``anthropic-beta`` header to forward to Anthropic upstreams (validated: comma-separated tokens)."""
    value = headers.get("anthropic-beta") if headers is not None else None
    if value is None:
        return {}
    if not _BETA.fullmatch(value.strip()):
        raise invalid("anthropic-beta must be a comma-separated list of beta names", param="anthropic-beta")
    return {"anthropic-beta": value.strip()}


def _kept(
    items: list[Any], path: str, translated: frozenset[str], only: list[str], documents: list[str] | None = None
) -> list[Any]:
    """``items`` without those whose ``type`` has no translation; each one left out is named in ``only``.

    With ``documents``, an Anthropic document block Bedrock Converse can carry is named there instead.
    """
    kept = []
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and kind not in translated:
            into = documents if documents is not None and kind == "document" and document_format(item) else only
            into.append(f"{path}[{i}] ({kind[:40]})")
            continue
        kept.append(item)
    return kept


def split_anthropic(body: Any) -> tuple[Any, list[str], list[str]]:
    """The body without untranslatable blocks and tools, the paths of what was taken out, and of its documents.

    Unknown tool kinds (Anthropic-defined ``bash_*``, ``text_editor_*``, server tools ``web_search_*``) and
    blocks (``document``, ``search_result``, server tool results) are removed from the copy; so is a block's
    ``cache_control`` (a hint). A document of base64 data or plain text is listed apart: Bedrock carries it too
    (:func:`turnout.providers.converse.document_format`). The original body is left as it is.
    """
    if not isinstance(body, dict):
        return body, [], []
    only: list[str] = [name for name in ANTHROPIC_ONLY_FIELDS if body.get(name)]
    documents: list[str] = []
    out = dict(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        kept_messages = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("content"), list):
                kept_messages.append(m)
                continue
            kept_messages.append(
                {**m, "content": _kept(m["content"], f"messages[{i}].content", ANTHROPIC_BLOCKS, only, documents)}
            )
        out["messages"] = kept_messages
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = _kept(tools, "tools", _ANTHROPIC_TOOLS, only)
    return out, only, documents


def split_openai_chat(body: Any) -> tuple[Any, list[str]]:
    """The Chat Completions body without what has no translation, and the paths of what was taken out.

    ``file`` and audio parts, ``custom`` tools, ``role: "function"`` messages, ``n > 1`` and the audio /
    prediction / web-search fields pass through to an OpenAI Chat entry only. ``tool_choice: allowed_tools``
    is translated: the tools it allows, with its mode.
    """
    if not isinstance(body, dict):
        return body, []
    only: list[str] = [name for name in OPENAI_ONLY_FIELDS if body.get(name)]
    out = dict(body)
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        only.append("n")
        out.pop("n")
    messages = body.get("messages")
    if isinstance(messages, list):
        kept_messages = []
        for i, m in enumerate(messages):
            if isinstance(m, dict) and m.get("role") == "function":
                only.append(f"messages[{i}] (role function)")
                continue
            if isinstance(m, dict) and isinstance(m.get("content"), list):
                m = {**m, "content": _kept(m["content"], f"messages[{i}].content", OPENAI_PARTS, only)}
            kept_messages.append(m)
        out["messages"] = kept_messages
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = _kept(tools, "tools", _OPENAI_TOOLS, only)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        out["tools"], out["tool_choice"] = _allowed_tools(choice, out.get("tools"))
    return out, only


def _allowed_tools(choice: Mapping[str, Any], tools: Any) -> tuple[Any, str]:
    """``tool_choice: allowed_tools`` as plain tools and choice: only the allowed functions, in the given mode."""
    spec = choice.get("allowed_tools")
    spec = spec if isinstance(spec, Mapping) else {}
    allowed = {
        t.get("function", {}).get("name") if isinstance(t.get("function"), Mapping) else t.get("name")
        for t in spec.get("tools") or ()
        if isinstance(t, Mapping)
    }
    kept = [
        t
        for t in tools or ()
        if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping) and t["function"].get("name") in allowed
    ]
    mode = spec.get("mode")
    return kept, mode if mode in ("auto", "required") else "auto"


#: Where each protocol's body carries the output bound of an answer (OpenAI Chat's other name is ``max_tokens``).
_OUTPUT_FIELDS = {
    "openai-chat": "max_completion_tokens",
    "openai-responses": "max_output_tokens",
    "anthropic": "max_tokens",
}


def bounded(request: NativeRequest, max_tokens: int) -> NativeRequest:
    """``request`` whose body asks for at most ``max_tokens`` output tokens an answer, under its protocol's field.

    What a limited key's call passes through carries the bound its reservation priced, whatever the client's body
    said: an OpenAI Chat body keeps one of its two names for it (``max_completion_tokens``; the adapter renames it
    for an upstream that reads ``max_tokens``), so no upstream reads a larger one beside it.
    """
    name = _OUTPUT_FIELDS.get(request.protocol)
    if name is None or not isinstance(request.body, Mapping):
        return request
    body = dict(request.body)
    if request.protocol == "openai-chat":
        body.pop("max_tokens", None)
    body[name] = max_tokens
    return dataclasses.replace(request, body=body)


def native(
    protocol: str,
    body: Any,
    only: list[str],
    headers: Mapping[str, str] | None = None,
    documents: list[str] | None = None,
) -> NativeRequest:
    """The pass-through record of a body (``only``: its untranslatable parts; ``documents``: its documents)."""
    return NativeRequest(
        protocol=protocol, body=body, headers=dict(headers or {}), only=tuple(only), documents=tuple(documents or ())
    )
