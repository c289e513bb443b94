"""Azure OpenAI chat (``POST /openai/deployments/{deployment}/chat/completions?api-version=...``).

OpenAI Chat with Azure's quirks: the deployment is the model, streams open with a chunk carrying
``choices: []`` and ``prompt_filter_results``, every choice has ``content_filter_results``, refusals
finish with ``content_filter``, and errors use Azure's own bodies (string ``code``, the
``content_filter`` + ``ResponsibleAIPolicyViolation`` 400).
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage
from turnout.sim.wire.base import Parsed, StreamEncoder, Unit, dumps, sse
from turnout.sim.wire.openai_chat import ChatStream, OpenAIChat, finish_reason, openai_error

_SAFE = {"filtered": False, "severity": "safe"}
COMPLETION_FILTERS = {"hate": _SAFE, "self_harm": _SAFE, "sexual": _SAFE, "violence": _SAFE}
PROMPT_FILTERS = {**COMPLETION_FILTERS, "jailbreak": {"filtered": False, "detected": False}}
_BLOCKED_FILTERS = {**PROMPT_FILTERS, "violence": {"filtered": True, "severity": "medium"}}


class AzureChat(OpenAIChat):
    """The Azure OpenAI deployment-scoped chat protocol."""

    protocol = "azure"
    request_id_header = "apim-request-id"

    def choice_extra(self) -> dict[str, Any]:
        """Azure adds ``content_filter_results`` to every choice."""
        return {"content_filter_results": COMPLETION_FILTERS}

    def finish(self, content: Content) -> str:
        """A blocked completion finishes with ``content_filter``."""
        return "content_filter" if content.finish is Finish.REFUSAL else finish_reason(content)

    def message(self, content: Content) -> dict[str, Any]:
        """Azure sends no refusal text: the filter hides the completion."""
        message = super().message(content)
        if content.refusal:
            message["content"] = None
            message["refusal"] = None
        return message

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """OpenAI's body plus ``prompt_filter_results``."""
        base = super().body(req, content, usage)
        return base[:-1] + b',"prompt_filter_results":' + dumps(_prompt_filter()) + b"}"

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """An Azure chunk stream."""
        return AzureStream(req, content, usage, self)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """Azure's error bodies where they differ from OpenAI's."""
        kind = spec.kind
        if kind is ErrorKind.RATE_LIMIT:
            hint = (
                f"Please retry after {spec.retry_after:g} seconds."
                if spec.retry_after is not None
                else "Please retry later."
            )
            message = (
                "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
                "2024-08-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. "
                f"{hint} Please go here: https://aka.ms/oai/quotaincrease if you would like to further "
                "increase the default rate limit."
            )
            return dumps({"error": {"code": "429", "message": spec.message or message}})
        if kind is ErrorKind.AUTH:
            message = (
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a "
                "valid key for an active subscription and use a correct regional API endpoint for your resource."
            )
            return dumps({"error": {"code": "401", "message": spec.message or message}})
        if kind is ErrorKind.NOT_FOUND:
            message = (
                "The API deployment for this resource does not exist. If you created the deployment within "
                "the last 5 minutes, please wait a moment and try again."
            )
            return dumps({"error": {"code": "DeploymentNotFound", "message": spec.message or message}})
        if kind is ErrorKind.CONTENT_FILTER:
            message = (
                "The response was filtered due to the prompt triggering Azure OpenAI's content management "
                "policy. Please modify your prompt and retry. To learn more about our content filtering "
                "policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766"
            )
            return dumps(
                {
                    "error": {
                        "message": spec.message or message,
                        "type": None,
                        "param": "prompt",
                        "code": "content_filter",
                        "status": 400,
                        "innererror": {
                            "code": "ResponsibleAIPolicyViolation",
                            "content_filter_result": _BLOCKED_FILTERS,
                        },
                    }
                }
            )
        return dumps({"error": openai_error(spec, req.model)})


def _prompt_filter() -> list[dict[str, Any]]:
    return [{"prompt_index": 0, "content_filter_results": PROMPT_FILTERS}]


class AzureStream(ChatStream):
    """Azure's chunk stream: a ``prompt_filter_results`` chunk first; refusals send no text."""

    def plan(self) -> list[Unit]:
        """No refusal units: Azure filters the completion instead."""
        return [u for u in super().plan() if u.kind != "refusal"]

    def head(self) -> bytes:
        """The prompt filter chunk (empty id and model, ``created: 0``), then the role chunk."""
        first = {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": _prompt_filter(),
        }
        return sse(first) + super().head()
