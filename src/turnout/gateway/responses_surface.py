"""The OpenAI Responses surface: ``POST /v1/responses`` in the Responses API's own wire format.

The conversation comes in ``input`` (message items, ``function_call`` and ``function_call_output`` items,
reasoning items), after the one ``previous_response_id`` names: unless the request says ``store: false``, the
gateway keeps each answered conversation for a while (:mod:`turnout.gateway.conversations`) and a later request
of the same client key continues it. ``conversation`` and ``item_reference`` items are a 400 that says so.
``instructions`` becomes the system prompt, function tools become tools, ``text.format`` structured output,
``reasoning.summary`` asks for reasoning summaries (returned as ``reasoning`` items where the upstream gives
reasoning). Any upstream serves it through the walk; an OpenAI Responses upstream gets the client's own body
(see :mod:`turnout.gateway.passthrough`). Streams are encoded by :mod:`turnout.gateway.responses_stream`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnout.core.errors import RefusalError
from turnout.core.types import ContentPart, ImagePart, Message, ResponseFormat, TextPart, ToolCall, ToolSpec
from turnout.gateway.bounds import MAX_FIELD_CHARS, MAX_MODEL_CHARS, parse_json, validation_message
from turnout.gateway.failures import Failure, invalid
from turnout.gateway.openai_surface import error_json
from turnout.gateway.passthrough import native
from turnout.gateway.responses_stream import ResponsesStreamEncoder, output_items, response_object
from turnout.gateway.surface import ChatCall, Kept, refusal_text
from turnout.reply import Reply

#: Input item types Turnout translates (a message may come without ``type``).
_ITEMS = frozenset(("message", "function_call", "function_call_output", "reasoning"))
#: Request fields that need state the gateway does not keep.
_STATEFUL = ("conversation",)
#: What a ``previous_response_id`` may look like (the gateway's ids are ``resp_`` and hex digits).
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class _In(BaseModel):
    # strict: a string where a number or a boolean belongs is an error, never coerced ("10", "yes")
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _Format(_In):
    type: Literal["text", "json_object", "json_schema"]
    name: str = Field(default="response", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class _Text(_In):
    format: _Format | None = None


class _Reasoning(_In):
    effort: str | None = None
    summary: str | None = None


class _FunctionTool(_In):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _NamedChoice(_In):
    type: Literal["function"]
    name: str


class ResponsesRequest(_In):
    """The fields of a Responses request the gateway acts on (others pass through or are ignored)."""

    model: str = Field(default="", max_length=MAX_MODEL_CHARS)
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    stream: bool | None = False
    tools: list[_FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | _NamedChoice | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, gt=0)
    text: _Text | None = None
    reasoning: _Reasoning | None = None
    user: str | None = Field(default=None, max_length=MAX_FIELD_CHARS)
    safety_identifier: str | None = Field(default=None, max_length=MAX_FIELD_CHARS)
    background: bool | None = None


def _split(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The body without what has no translation (other tool kinds, other item types), and their paths."""
    only: list[str] = []
    out = dict(body)
    tools = body.get("tools")
    if isinstance(tools, list):
        kept = []
        for i, tool in enumerate(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                only.append(f"tools[{i}] ({str(kind)[:40]})")
                continue
            kept.append(tool)
        out["tools"] = kept
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in (None, "function"):
        only.append(f"tool_choice ({str(choice.get('type'))[:40]})")
        out.pop("tool_choice")
    items = body.get("input")
    if isinstance(items, list):
        kept_items = []
        for i, item in enumerate(items):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind == "item_reference":
                raise invalid(
                    f"input[{i}]: item_reference is not supported: this gateway keeps whole conversations by "
                    "previous_response_id, not items; send the item itself",
                    param=f"input[{i}]",
                )
            if kind not in _ITEMS:
                only.append(f"input[{i}] ({str(kind)[:40]})")
                continue
            kept_items.append(item)
        out["input"] = kept_items
    return out, only


def _text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raise invalid(f"input[{i}].content must be a string or a list of parts", param=f"input[{i}].content")


def _parts(content: Any, i: int, only: list[str]) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"input[{i}].content must be a string or a list of parts", param=f"input[{i}].content")
    parts: list[ContentPart] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(text=str(part.get("text", ""))))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(ImagePart(url=part["image_url"], detail=part.get("detail")))
        else:  # input_file, an image by file_id, audio: only a Responses upstream can read them
            only.append(f"input[{i}].content[{j}] ({str(kind)[:40]})")
    return tuple(parts)


def _messages(req: ResponsesRequest, only: list[str]) -> tuple[Message, ...]:
    out: list[Message] = []
    if req.instructions:
        out.append(Message(role="system", content=req.instructions))
    if isinstance(req.input, str):
        out.append(Message(role="user", content=req.input))
        return tuple(out)
    reasoning: list[str] = []
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        if kind == "reasoning":
            reasoning += [str(s.get("text", "")) for s in item.get("summary") or () if isinstance(s, dict)]
        elif kind == "function_call":
            call = ToolCall(
                id=str(item.get("call_id") or ""),
                name=str(item.get("name") or ""),
                arguments=str(item.get("arguments") or "{}"),
            )
            if not call.id or not call.name:
                raise invalid(f"input[{i}]: a function_call needs call_id and name", param=f"input[{i}]")
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":  # calls of one turn join its message
                out[-1] = replace(last, tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message(role="assistant", tool_calls=(call,), reasoning="\n\n".join(reasoning) or None))
                reasoning = []
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, i)
            out.append(Message(role="tool", content=text, tool_call_id=str(item.get("call_id") or "")))
        else:
            role = item.get("role")
            if role in ("system", "developer"):
                out.append(Message(role="system", content=_text(item.get("content"), i)))
            elif role == "assistant":
                out.append(
                    Message(
                        role="assistant",
                        content=_text(item.get("content"), i),
                        reasoning="\n\n".join(reasoning) or None,
                    )
                )
                reasoning = []
            elif role == "user":
                out.append(Message(role="user", content=_parts(item.get("content"), i, only)))
            else:
                raise invalid(f"input[{i}].role must be user, assistant, system or developer", param=f"input[{i}].role")
    return tuple(out)


def _format(text: _Text | None) -> ResponseFormat | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(kind="json_object")
    return ResponseFormat(
        kind="json_schema",
        schema=fmt.schema_ or {"type": "object"},
        name=fmt.name,
        description=fmt.description,
        strict=bool(fmt.strict),
    )


def _kept(raw: dict[str, Any]) -> Kept | None:
    """The conversation state of a request: None for a ``store: false`` one that continues nothing."""
    previous = raw.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not _RESPONSE_ID.fullmatch(previous)):
        raise invalid("previous_response_id must be the id of an earlier response", param="previous_response_id")
    store = raw.get("store", True)
    if not isinstance(store, bool):
        raise invalid("store must be a boolean", param="store")
    if previous is None and not store:
        return None
    items = raw.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    elif not isinstance(items, list):
        items = []  # the model check below names the field
    return Kept(previous_id=previous, store=store, items=tuple(items), body=raw)


def resumed(call: ChatCall, prior: list[dict[str, Any]]) -> ChatCall:
    """``call`` continuing the conversation ``prior`` (the input items of a kept response, then its output).

    The request is translated again with ``prior`` in front of its own input; its body passed through to a
    Responses upstream carries the whole conversation and no ``previous_response_id`` (the upstream never saw it).
    """
    kept = call.kept
    assert kept is not None
    items = (*prior, *kept.items)
    body = {k: v for k, v in kept.body.items() if k != "previous_response_id"}
    body["input"] = list(items)
    return _call(body, Kept(previous_id=kept.previous_id, store=kept.store, items=items, body=kept.body))


def _call(raw: dict[str, Any], kept: Kept | None) -> ChatCall:
    """The :class:`ChatCall` of a request body."""
    modelled, only = _split(raw)
    try:
        req = ResponsesRequest.model_validate(modelled)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise invalid(message, param=param) from None
    if req.background:
        raise invalid(
            "background responses are not supported: this gateway answers while it is asked", param="background"
        )
    messages = _messages(req, only)
    choice = req.tool_choice
    summaries = req.reasoning is not None and req.reasoning.summary is not None
    return ChatCall(
        model=req.model,
        messages=messages,
        tools=tuple(
            ToolSpec(
                name=t.name,
                description=t.description or "",
                parameters=t.parameters or {"type": "object", "properties": {}},
            )
            for t in req.tools or ()
        ),
        tool_choice=choice.name if isinstance(choice, _NamedChoice) else choice,
        temperature=req.temperature,
        max_tokens=req.max_output_tokens,
        stream=bool(req.stream),
        thinking=summaries,
        show_reasoning=summaries,
        sender=req.safety_identifier or req.user,
        response_format=_format(req.text),
        native=native("openai-responses", raw, only),
        kept=kept,
    )


class ResponsesSurface:
    """Responses requests and answers (see :class:`turnout.gateway.surface.Surface`)."""

    name = "responses"

    def parse(self, body: bytes, headers: Mapping[str, str] | None = None) -> ChatCall:
        """Validate the body and translate it into a :class:`ChatCall`.

        A request naming ``previous_response_id`` is translated without the conversation it continues:
        :func:`resumed` puts that in front once it is found.
        """
        raw = parse_json(body)
        for name in _STATEFUL:
            if raw.get(name):
                raise invalid(
                    f"{name} is not supported: this gateway keeps conversations only by previous_response_id; "
                    "send the conversation in input",
                    param=name,
                    code="unsupported_parameter",
                )
        return _call(raw, _kept(raw))

    def reply_body(self, reply: Reply, call: ChatCall) -> bytes:
        """A ``response`` object (``status: "incomplete"`` for an answer cut by the token limit).

        When the request held what only the Responses API carries (other tool kinds, file inputs), the
        Responses upstream's own response is relayed (its id, model, ``store`` and ``previous_response_id``
        replaced by the gateway's).
        """
        if reply.native is not None and call.native is not None and call.native.only:
            kept = call.kept
            relayed = {
                **reply.native,
                "id": f"resp_{reply.call_id}",
                "model": reply.served.model,
                "store": kept is not None and kept.store,
                "previous_response_id": kept.previous_id if kept is not None else None,
            }
            return orjson.dumps(relayed)
        output = output_items(
            reply.call_id,
            text=reply.text,
            reasoning=reply.reasoning if call.thinking else None,
            calls=reply.tool_calls,
        )
        status = "incomplete" if reply.finish_reason == "length" else "completed"
        body = response_object(call, reply.call_id, reply.served.model, status, output, reply.usage)
        return orjson.dumps(body)

    def refusal_body(self, exc: RefusalError, model: str, call: ChatCall, call_id: str) -> bytes:
        """A completed response whose message holds a ``refusal`` part."""
        output = output_items(call_id, refusal=refusal_text(exc))
        return orjson.dumps(response_object(call, call_id, model, "completed", output, None))

    def error_body(self, failure: Failure) -> bytes:
        """OpenAI's error JSON (the Responses API uses the same envelope)."""
        return orjson.dumps(error_json(failure))

    def stream_encoder(self, call: ChatCall, model: str, call_id: str) -> ResponsesStreamEncoder:
        """``response.created`` … ``response.completed`` with every item's events."""
        return ResponsesStreamEncoder(call, model, call_id, created=int(time.time()))
