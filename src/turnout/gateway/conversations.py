"""Kept Responses conversations: what a later request names with ``previous_response_id``.

Unless a request says ``store: false``, the gateway keeps the conversation it answered (the request's input
items, after those of the response it continued, then the answer's output items) in the state store, so every
worker and, with ``[state] backend = "redis"``, every host finds it. It is kept for
``[gateway] responses_ttl_secs``; one holding more than ``responses_max_items`` items or ``responses_max_bytes``
bytes of JSON is not kept (a warning says so; naming it later is answered as an unknown id).

A conversation belongs to the client key that made it: its store key holds a hash of the key's name, never the
key, and another key's request finds nothing there, so it is answered exactly as an unknown id is (404
``previous_response_not_found``, as the OpenAI API answers).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from turnout.gateway.failures import Failure, RequestRejected
from turnout.gateway.responses_surface import resumed
from turnout.gateway.surface import ChatCall
from turnout.state.base import StateStore

log = logging.getLogger("turnout.gateway")

#: Fields of an output item that only an answer carries (an input item is the same without them).
_ANSWER_ONLY = ("id", "status")


def _owner(caller: str) -> str:
    """The store's name of a client key: a hash of its name (never the key)."""
    return hashlib.sha256(caller.encode()).hexdigest()[:32]


def not_found(response_id: str) -> RequestRejected:
    """The 404 for an id that is unknown, expired, or another key's (the three are answered alike)."""
    return RequestRejected(
        Failure(
            status=404,
            kind="not_found",
            message=f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    )


class Conversations:
    """Keeps and resumes Responses conversations in a state store.

    Args:
        store: The state store (the client's).
        ttl: Seconds a conversation stays nameable.
        max_items: The most items a kept conversation holds.
        max_bytes: The most bytes of JSON a kept conversation holds.
    """

    def __init__(self, store: StateStore, *, ttl: float, max_items: int, max_bytes: int) -> None:
        self.store = store
        self.ttl = ttl
        self.max_items = max_items
        self.max_bytes = max_bytes

    @staticmethod
    def _key(caller: str, response_id: str) -> str:
        return f"resp:{_owner(caller)}:{response_id}"

    async def resume(self, call: ChatCall, caller: str) -> ChatCall:
        """``call`` with the conversation its ``previous_response_id`` names in front of its input.

        Raises:
            RequestRejected: 404 ``previous_response_not_found``: no such conversation for this key.
        """
        kept = call.kept
        if kept is None or kept.previous_id is None:
            return call
        value = await self.store.kept(self._key(caller, kept.previous_id))
        if value is None:
            raise not_found(kept.previous_id)
        try:
            items = orjson.loads(value)["items"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning("turnout gateway: a kept Responses conversation cannot be read; answered as unknown")
            raise not_found(kept.previous_id) from None
        if not isinstance(items, list):
            raise not_found(kept.previous_id)
        return resumed(call, items)

    async def keep(self, call: ChatCall, caller: str, call_id: str, output: Sequence[Mapping[str, Any]]) -> bool:
        """Keep the conversation of ``call`` and its answer ``output`` as ``resp_<call_id>``; False when not kept.

        Nothing is kept for a ``store: false`` request, nor for a conversation beyond the bounds.
        """
        kept = call.kept
        if kept is None or not kept.store:
            return False
        items = [*kept.items, *({k: v for k, v in item.items() if k not in _ANSWER_ONLY} for item in output)]
        value = orjson.dumps({"items": items}) if len(items) <= self.max_items else b""
        if not value or len(value) > self.max_bytes:
            log.warning(
                "turnout gateway: Responses conversation resp_%s not kept: %d items or %d bytes exceed "
                "[gateway] responses_max_items = %d or responses_max_bytes = %d",
                call_id,
                len(items),
                len(value),
                self.max_items,
                self.max_bytes,
            )
            return False
        try:
            await self.store.keep(self._key(caller, f"resp_{call_id}"), value, self.ttl)
        except Exception:  # a store that fails must not fail the answer already made
            log.warning("turnout gateway: cannot keep Responses conversation resp_%s", call_id, exc_info=True)
            return False
        return True
