"""The Responses API's answer shapes: ``response`` objects, output items, and the typed event stream.

A stream is ``response.created``, ``response.in_progress``, then for each output item
``response.output_item.added`` … ``response.output_item.done`` with its content events (a message's
``content_part.added``, ``output_text.delta`` … ``output_text.done``, ``content_part.done``; a reasoning
item's ``reasoning_summary_part.added`` and ``reasoning_summary_text.delta``; a function call's
``function_call_arguments.delta`` and ``.done``), and finally ``response.completed`` (``response.incomplete``
for an answer cut by the token limit) carrying the whole response with its usage. Every event has a
``sequence_number``. A stream cut after output ends with an ``error`` event and ``response.failed``, never
with ``response.completed`` (on the wire).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from turnout.core.errors import ErrorClass, RefusalError
from turnout.core.types import Final, ReasoningDelta, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from turnout.gateway.failures import Failure
from turnout.gateway.openai_surface import error_json
from turnout.gateway.surface import refusal_text

if TYPE_CHECKING:
    from turnout.gateway.surface import ChatCall


def usage_json(u: Usage | None) -> dict[str, Any] | None:
    """Responses ``usage`` (input includes cached input)."""
    if u is None:
        return None
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens, "cache_write_tokens": u.cache_write_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, part: dict[str, Any] | None, status: str = "completed") -> dict[str, Any]:
    """An assistant message item holding ``part`` (none while it is in progress)."""
    content = [part] if part is not None else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None) -> dict[str, Any]:
    """A reasoning item whose summary is ``text`` (no summary part while it is empty)."""
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"id": item_id, "type": "reasoning", "summary": summary}


def call_item(item_id: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    """A ``function_call`` item."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": (call.arguments or "{}") if status == "completed" else "",
    }


def output_items(
    call_id: str,
    *,
    text: str = "",
    reasoning: str | None = None,
    calls: Sequence[ToolCall] = (),
    refusal: str | None = None,
) -> list[dict[str, Any]]:
    """The ``output`` of a complete answer: reasoning, the message (text or refusal), then the function calls."""
    out: list[dict[str, Any]] = []
    if reasoning:
        out.append(reasoning_item(f"rs_{call_id}", reasoning))
    if refusal is not None:
        out.append(message_item(f"msg_{call_id}", {"type": "refusal", "refusal": refusal}))
    elif text or not calls:
        out.append(message_item(f"msg_{call_id}", _text_part(text)))
    out.extend(call_item(f"fc_{call_id}_{i}", c) for i, c in enumerate(calls))
    return out


def response_object(
    call: ChatCall,
    call_id: str,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None,
    *,
    created: int | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``response`` object, echoing the request's settings as the API does."""
    fmt = call.response_format
    if fmt is None:
        text_format: dict[str, Any] = {"type": "text"}
    elif fmt.kind == "json_object":
        text_format = {"type": "json_object"}
    else:
        text_format = {"type": "json_schema", "name": fmt.name, "schema": dict(fmt.schema or {}), "strict": fmt.strict}
    choice: Any = call.tool_choice or "auto"
    if choice not in ("auto", "none", "required"):
        choice = {"type": "function", "name": choice}
    return {
        "id": f"resp_{call_id}",
        "object": "response",
        "created_at": created if created is not None else int(time.time()),
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": call.max_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": call.kept.previous_id if call.kept is not None else None,
        "reasoning": {"effort": None, "summary": "auto" if call.thinking else None},
        "store": call.kept is not None and call.kept.store,
        "temperature": call.temperature,
        "text": {"format": text_format},
        "tool_choice": choice,
        "tools": [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
                "strict": False,
            }
            for t in call.tools
        ],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage_json(usage),
        "user": None,
        "metadata": {},
    }


class ResponsesStreamEncoder:
    """One streamed response as Responses events (see :class:`turnout.gateway.surface.StreamEncoder`)."""

    def __init__(self, call: ChatCall, model: str, call_id: str, *, created: int) -> None:
        self._call = call
        self._model = model
        self._id = call_id
        self._created = created
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # finished items, in order
        self._open: str | None = None  # "message" or "reasoning" while one is open
        self._parts: list[str] = []
        self._calls = 0
        self._status = "completed"

    # --- framing ------------------------------------------------------------------------------------

    def _ev(self, kind: str, **fields: Any) -> bytes:
        data = orjson.dumps({"type": kind, **fields, "sequence_number": self._seq})
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def _response(self, status: str, usage: Usage | None, **kw: Any) -> dict[str, Any]:
        return response_object(
            self._call, self._id, self._model, status, list(self._output), usage, created=self._created, **kw
        )

    @property
    def output(self) -> list[dict[str, Any]]:
        """The finished output items so far (after :meth:`finish`: the whole answer's)."""
        return list(self._output)

    @property
    def _index(self) -> int:
        return len(self._output)

    def _open_item(self, kind: str) -> bytes:
        out = self._close()
        self._open = kind
        self._parts = []
        if kind == "message":
            item_id = f"msg_{self._id}"
            return (
                out
                + self._ev(
                    "response.output_item.added",
                    output_index=self._index,
                    item=message_item(item_id, None, "in_progress"),
                )
                + self._ev(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=self._index,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        item_id = f"rs_{self._id}"
        return (
            out
            + self._ev("response.output_item.added", output_index=self._index, item=reasoning_item(item_id, None))
            + self._ev(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=self._index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        )

    def _close(self) -> bytes:
        kind, self._open = self._open, None
        if kind is None:
            return b""
        text = "".join(self._parts)
        index = self._index
        if kind == "message":
            item_id = f"msg_{self._id}"
            common = {"item_id": item_id, "output_index": index, "content_index": 0}
            item = message_item(item_id, _text_part(text))
            out = self._ev("response.output_text.done", **common, text=text, logprobs=[]) + self._ev(
                "response.content_part.done", **common, part=_text_part(text)
            )
        else:
            item_id = f"rs_{self._id}"
            common = {"item_id": item_id, "output_index": index, "summary_index": 0}
            item = reasoning_item(item_id, text)
            out = self._ev("response.reasoning_summary_text.done", **common, text=text) + self._ev(
                "response.reasoning_summary_part.done", **common, part={"type": "summary_text", "text": text}
            )
        self._output.append(item)
        return out + self._ev("response.output_item.done", output_index=index, item=item)

    # --- the encoder ----------------------------------------------------------------------------------

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        return self._ev("response.created", response=self._response("in_progress", None)) + self._ev(
            "response.in_progress", response=self._response("in_progress", None)
        )

    def event(self, event: StreamEvent) -> bytes:
        """Item events for text, reasoning (when summaries were asked for) and function calls."""
        if isinstance(event, TextDelta):
            head = self._open_item("message") if self._open != "message" else b""
            self._parts.append(event.text)
            return head + self._ev(
                "response.output_text.delta",
                item_id=f"msg_{self._id}",
                output_index=self._index,
                content_index=0,
                delta=event.text,
                logprobs=[],
            )
        if isinstance(event, ReasoningDelta):
            if not self._call.thinking:
                return b""
            head = self._open_item("reasoning") if self._open != "reasoning" else b""
            self._parts.append(event.text)
            return head + self._ev(
                "response.reasoning_summary_text.delta",
                item_id=f"rs_{self._id}",
                output_index=self._index,
                summary_index=0,
                delta=event.text,
            )
        if isinstance(event, ToolCallEvent):
            out = self._close()
            item_id = f"fc_{self._id}_{self._calls}"
            self._calls += 1
            index, call = self._index, event.call
            args = call.arguments or "{}"
            item = call_item(item_id, call)
            self._output.append(item)
            return (
                out
                + self._ev(
                    "response.output_item.added", output_index=index, item=call_item(item_id, call, "in_progress")
                )
                + self._ev("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=args)
                + self._ev(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    arguments=args,
                    name=call.name,
                )
                + self._ev("response.output_item.done", output_index=index, item=item)
            )
        if isinstance(event, Final):
            if event.finish_reason == "length":
                self._status = "incomplete"
            return self._close()
        return b""

    def finish(self, usage: Usage | None) -> bytes:
        """``response.completed`` (or ``response.incomplete``) with the whole response and its usage."""
        out = self._close()
        status = self._status
        return out + self._ev(f"response.{status}", response=self._response(status, usage))

    def refusal(self, exc: RefusalError, *, started: bool) -> bytes:
        """(The opening,) a message item with a ``refusal`` part, then ``response.completed``."""
        out = b"" if started else self.start()
        out += self._close()
        item_id, index, text = f"msg_{self._id}", self._index, refusal_text(exc)
        common = {"item_id": item_id, "output_index": index, "content_index": 0}
        part = {"type": "refusal", "refusal": text}
        item = message_item(item_id, part)
        out += (
            self._ev("response.output_item.added", output_index=index, item=message_item(item_id, None, "in_progress"))
            + self._ev("response.content_part.added", **common, part={"type": "refusal", "refusal": ""})
            + self._ev("response.refusal.delta", **common, delta=text)
            + self._ev("response.refusal.done", **common, refusal=text)
            + self._ev("response.content_part.done", **common, part=part)
            + self._ev("response.output_item.done", output_index=index, item=item)
        )
        self._output.append(item)
        return out + self._ev("response.completed", response=self._response("completed", None))

    def interrupted(self, failure: Failure) -> bytes:
        """An ``error`` event (the SDKs raise on it), then ``response.failed``; never ``response.completed``."""
        err = error_json(failure)["error"]
        if failure.cause is ErrorClass.RATE_LIMITED:
            err["type"] = "rate_limit_error"
        event = self._ev("error", code=err["code"], message=err["message"], param=None, error=err)
        failed = self._response("failed", None, error={"code": "server_error", "message": err["message"]})
        return event + self._ev("response.failed", response=failed)
