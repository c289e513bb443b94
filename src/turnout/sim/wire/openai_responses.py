"""OpenAI Responses (``POST /v1/responses``).

Streams use ``event: <type>`` + ``data: {"type": <type>, ..., "sequence_number": n}`` and end with a
terminal event (``response.completed`` / ``response.incomplete`` / ``response.failed``), never
``[DONE]`` (``tests/fixtures/openai/responses_stream_text.sse``). An in-band error is the recorded
pair: an ``error`` event with a nested ``error`` object, then ``response.failed``.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import Content, ErrorSpec, Finish, SimUsage, ToolCall
from turnout.sim.schema import responses_schema
from turnout.sim.wire.base import (
    Codec,
    Parsed,
    StreamEncoder,
    Unit,
    broken,
    dumps,
    new_id,
    now,
    part_words,
    sse,
    tool_halves,
    words,
)
from turnout.sim.wire.openai_chat import openai_error


def responses_usage(usage: SimUsage) -> dict[str, Any]:
    """Responses ``usage`` (input tokens include cached ones)."""
    return {
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cached_input},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.input + usage.output,
    }


class _Ids:
    """Item ids of one response."""

    def __init__(self, rid: str) -> None:
        self.response = f"resp_sim{rid}"
        self.reasoning = f"rs_sim{rid}"
        self.message = f"msg_sim{rid}"
        self.rid = rid

    def call(self, call: ToolCall) -> str:
        return f"fc_sim{self.rid}_{call.index}"


def _reasoning_item(ids: _Ids, text: str) -> dict[str, Any]:
    return {"id": ids.reasoning, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _message_item(ids: _Ids, part: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    content = [part] if status == "completed" else []
    return {"id": ids.message, "type": "message", "status": status, "content": content, "role": "assistant"}


def _call_item(ids: _Ids, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    return {
        "id": ids.call(call),
        "type": "function_call",
        "status": status,
        "arguments": call.arguments_json if status == "completed" else "",
        "call_id": call.id,
        "name": call.name,
    }


def _output(ids: _Ids, content: Content) -> list[dict[str, Any]]:
    output = []
    if content.reasoning:
        output.append(_reasoning_item(ids, content.reasoning_text))
    if content.refusal:
        output.append(_message_item(ids, {"type": "refusal", "refusal": content.refusal_text}))
    elif content.text or not content.tool_calls:
        output.append(_message_item(ids, _text_part(content.full_text)))
    output.extend(_call_item(ids, c) for c in content.tool_calls)
    return output


def _response(
    ids: _Ids,
    created: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    *,
    error: dict[str, Any] | None = None,
    incomplete: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": ids.response,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "completed_at": now() if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _final_state(content: Content) -> tuple[str, dict[str, Any] | None]:
    if content.finish is Finish.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


class OpenAIResponses(Codec):
    """The OpenAI Responses protocol."""

    protocol = "responses"

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Model, stream flag, input words (instructions + input items) and prefill."""
        items = payload.get("input")
        n = words(payload.get("instructions"))
        prefill = False
        if isinstance(items, str):
            n += words(items)
        elif isinstance(items, list):
            for item in items:
                if isinstance(item, dict):
                    n += part_words(item.get("content"), "text") + words(item.get("output"))
            last = items[-1] if items else None
            prefill = isinstance(last, dict) and last.get("role") == "assistant"
        model = payload.get("model")
        return Parsed(
            model=model if isinstance(model, str) else "",
            stream=payload.get("stream") is True,
            input_words=n,
            prefill=prefill,
            schema=responses_schema(payload.get("text")),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """A ``response`` object."""
        ids = _Ids(new_id())
        status, incomplete = _final_state(content)
        return dumps(
            _response(
                ids,
                now(),
                req.model,
                status,
                _output(ids, content),
                responses_usage(usage),
                incomplete=incomplete,
            )
        )

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """A Responses event stream."""
        return ResponsesStream(req, content, usage)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """Same envelope as Chat Completions."""
        return dumps({"error": openai_error(spec, req.model)})


class ResponsesStream(StreamEncoder):
    """Typed events with sequence numbers; a terminal response event ends the stream."""

    def __init__(self, req: Parsed, content: Content, usage: SimUsage) -> None:
        super().__init__(req, content, usage)
        self.ids = _Ids(self.rid)
        self.seq = 0
        self.indexes: dict[str, int] = {}
        index = 0
        for u in self.units:
            key = self._item_key(u)
            if key not in self.indexes:
                self.indexes[key] = index
                index += 1

    @staticmethod
    def _item_key(u: Unit) -> str:
        if u.kind == "tool":
            return f"tool{u.value.index}"
        return "reasoning" if u.kind == "reasoning" else "message"

    def ev(self, etype: str, **fields: Any) -> bytes:
        """One event with the next sequence number."""
        data = {"type": etype, **fields, "sequence_number": self.seq}
        self.seq += 1
        return sse(data, etype)

    def _resp(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None, **kw: Any) -> Any:
        return _response(self.ids, self.created, self.req.model, status, output, usage, **kw)

    def head(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        return self.ev("response.created", response=self._resp("in_progress", [], None)) + self.ev(
            "response.in_progress", response=self._resp("in_progress", [], None)
        )

    def unit(self, i: int) -> bytes:
        """The events of one unit, opening and closing its output item around it."""
        u = self.units[i]
        idx = self.indexes[self._item_key(u)]
        if u.kind == "tool":
            return self._tool(u.value, idx)
        if u.kind == "reasoning":
            return self._reasoning(u, idx)
        return self._message(u, idx)

    def _reasoning(self, u: Unit, idx: int) -> bytes:
        item_id = self.ids.reasoning
        common = {"item_id": item_id, "output_index": idx, "summary_index": 0}
        out = b""
        if u.first:
            out += self.ev(
                "response.output_item.added",
                output_index=idx,
                item={"id": item_id, "type": "reasoning", "summary": []},
            )
            out += self.ev("response.reasoning_summary_part.added", **common, part={"type": "summary_text", "text": ""})
        out += self.ev("response.reasoning_summary_text.delta", **common, delta=u.value)
        if u.last:
            text = self.content.reasoning_text
            out += self.ev("response.reasoning_summary_text.done", **common, text=text)
            out += self.ev(
                "response.reasoning_summary_part.done", **common, part={"type": "summary_text", "text": text}
            )
            out += self.ev("response.output_item.done", output_index=idx, item=_reasoning_item(self.ids, text))
        return out

    def _message(self, u: Unit, idx: int) -> bytes:
        refusal = u.kind == "refusal"
        common = {"item_id": self.ids.message, "output_index": idx, "content_index": 0}
        out = b""
        if u.first:
            empty = {"type": "refusal", "refusal": ""} if refusal else _text_part("")
            out += self.ev(
                "response.output_item.added",
                output_index=idx,
                item=_message_item(self.ids, empty, "in_progress"),
            )
            out += self.ev("response.content_part.added", **common, part=empty)
        if refusal:
            out += self.ev("response.refusal.delta", **common, delta=u.value)
        else:
            out += self.ev("response.output_text.delta", **common, delta=u.value, logprobs=[])
        if u.last:
            if refusal:
                text = self.content.refusal_text
                part = {"type": "refusal", "refusal": text}
                out += self.ev("response.refusal.done", **common, refusal=text)
            else:
                text = self.content.full_text
                part = _text_part(text)
                out += self.ev("response.output_text.done", **common, text=text, logprobs=[])
            out += self.ev("response.content_part.done", **common, part=part)
            out += self.ev("response.output_item.done", output_index=idx, item=_message_item(self.ids, part))
        return out

    def _tool(self, call: ToolCall, idx: int) -> bytes:
        item_id = self.ids.call(call)
        first_half, second_half = tool_halves(call)
        return (
            self.ev("response.output_item.added", output_index=idx, item=_call_item(self.ids, call, "in_progress"))
            + self.ev("response.function_call_arguments.delta", item_id=item_id, output_index=idx, delta=first_half)
            + self.ev("response.function_call_arguments.delta", item_id=item_id, output_index=idx, delta=second_half)
            + self.ev(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=idx,
                arguments=call.arguments_json,
            )
            + self.ev("response.output_item.done", output_index=idx, item=_call_item(self.ids, call))
        )

    def tail(self) -> bytes:
        """``response.completed`` (or ``response.incomplete``) with the whole response."""
        status, incomplete = _final_state(self.content)
        output = _output(self.ids, self.content)
        response = self._resp(status, output, responses_usage(self.usage), incomplete=incomplete)
        return self.ev(f"response.{status}", response=response)

    def error(self, spec: ErrorSpec) -> bytes:
        """An ``error`` event, then ``response.failed``."""
        err = openai_error(spec, self.req.model)
        code = err["code"] or err["type"]
        event = {"type": err["type"], "code": code, "message": err["message"], "param": None}
        failed = self._resp("failed", [], None, error={"code": code, "message": err["message"]})
        return self.ev("error", error=event) + self.ev("response.failed", response=failed)

    def malformed(self) -> bytes:
        """An ``output_text.delta`` event whose data is cut in half."""
        data = {"type": "response.output_text.delta", "item_id": self.ids.message, "delta": " garbled"}
        return b"event: response.output_text.delta\ndata: " + broken(data) + b"\n\n"
