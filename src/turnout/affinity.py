"""Prompt-cache affinity: a conversation goes back to the pool member (and key) that served it last.

Providers cache prompt prefixes per deployment and per key, so a conversation that lands on another member at
each turn pays the full input price every time. This module owns the whole decision:

- **The conversation's key** (:func:`conversation_key`): the client's own name for it when it gives one (the
  library's ``cache_key=``, which the gateway fills from a session header, :func:`session_of`; else the body's
  ``prompt_cache_key``, ``user`` or ``metadata.user_id``, as the caller's wire request carries them), else
  a hash of its stable prefix: the system prompt, the tools in name order and the first user message, taken from
  Turnout's neutral :class:`~turnout.types.ChatRequest`, so the same conversation hashes the same whether it came
  as OpenAI Chat, Responses or Anthropic Messages. Either way the key is a 128-bit BLAKE2b digest: no client text is
  kept.
- **The order** (:meth:`Affinity.arrange`): a pinned conversation's member goes first while it is healthy (its
  profile not cooling down, its breaker closed); a new conversation (or one whose member is not healthy) takes the
  pool's strategy's order, except that a member holding more than its share of the live conversations (its
  weight's share plus :data:`SHARE_MARGIN`) goes after the others.
- **The pin** (:meth:`Affinity.served`): whichever member served the turn, a pool's member or a fallback, becomes
  the conversation's pin, with the key it used; so a conversation moves once when its member fails and then
  sticks. Pins live in the state store (bounded, expiring ``ttl`` after their last use; shared through Redis).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from turnout.state.base import StateStore
from turnout.state.pins import DEFAULT_MAX_CONVERSATIONS, Pin
from turnout.types import ChatRequest, Message

#: Seconds a pin lives after its last use by default (providers keep a cached prefix about 5 minutes).
DEFAULT_TTL_S = 300.0
#: How far above its weight's share of the live conversations a member may go before new ones go elsewhere.
SHARE_MARGIN = 0.25
#: The longest explicit conversation name read from a request (longer ones are cut before hashing).
MAX_NAME_CHARS = 512
#: Request headers that name a conversation, first found wins: a generic one, Claude Code's (from 2.1.86), and
#: Codex CLI's (``session_id`` and ``conversation_id`` carry the same id; newer releases send ``session-id``).
#: orjson's options for the prefix's JSON: keys sorted (a tool's schema hashes the same whatever its key order).
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_blake2b = hashlib.blake2b
SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id", "session_id", "conversation_id")

__all__ = [
    "DEFAULT_MAX_CONVERSATIONS",
    "DEFAULT_TTL_S",
    "SESSION_HEADERS",
    "SHARE_MARGIN",
    "Affinity",
    "conversation_key",
    "session_of",
]


def session_of(headers: Mapping[str, str]) -> str | None:
    """The conversation a request's headers name (:data:`SESSION_HEADERS`), cut to :data:`MAX_NAME_CHARS`.

    Args:
        headers: The request's headers (a case-insensitive mapping, as aiohttp gives them).

    Returns:
        The first non-blank value (None: no header names one). Hostile text: it is only ever hashed.
    """
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            value = value[: MAX_NAME_CHARS + 64].strip()
            if value:
                return value[:MAX_NAME_CHARS]
    return None


def conversation_key(request: ChatRequest, explicit: str | None = None) -> str | None:
    """The affinity key of ``request``'s conversation (None: nothing to key it by: no messages).

    Args:
        request: The call's request.
        explicit: The caller's own name for the conversation (wins over everything in the request; default:
            the request's :attr:`~turnout.types.ChatRequest.cache_key`).
    """
    if not explicit:
        explicit = request.cache_key
    native = request.native
    name = f"session={explicit}" if explicit else (_named(native.body) if native is not None else None)
    if name:
        return "n:" + _blake2b(name[:MAX_NAME_CHARS].encode(errors="replace"), digest_size=16).hexdigest()
    system: list[str] = []
    first: str | None = None
    for message in request.messages:
        role = message.role
        if role == "system":
            system.append(message.content if isinstance(message.content, str) else _text(message))
        elif role == "user":
            first = message.content if isinstance(message.content, str) else _text(message)
            break
    if first is None and not system:
        return None
    tools = (
        sorted((t.name, t.description, _json(t.parameters).decode()) for t in request.tools) if request.tools else ()
    )
    try:
        prefix = orjson.dumps([system, tools, first], option=_SORTED)
    except TypeError:  # orjson refuses it (a lone surrogate, a type JSON lacks): the standard encoder does not
        prefix = _json([system, tools, first])
    return "p:" + _blake2b(prefix, digest_size=16).hexdigest()  # 128 bits: the same in every process


def _json(value: object) -> bytes:
    """``value`` as JSON with sorted keys (orjson; the standard encoder for what orjson refuses, a lone surrogate)."""
    try:
        return orjson.dumps(value, default=str, option=_SORTED)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str).encode(errors="replace")


def _named(body: Mapping[str, Any]) -> str | None:
    """The conversation's name in the caller's wire body: ``prompt_cache_key``, ``user`` or ``metadata.user_id``."""
    for field in ("prompt_cache_key", "user"):
        value = body.get(field)
        if isinstance(value, str) and value:
            return f"{field}={value[:MAX_NAME_CHARS]}"
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        value = metadata.get("user_id")
        if isinstance(value, str) and value:
            return f"user_id={value[:MAX_NAME_CHARS]}"
    return None


def _text(message: Message) -> str:
    """A message's text, the same whichever protocol carried it (parts joined; images by their source)."""
    content = message.content
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        text: Any = getattr(part, "text", None)
        out.append(text if isinstance(text, str) else repr(part))
    return "".join(out)


class Affinity:
    """Pins conversations to members: orders a pool's members for a call and records who served it.

    Args:
        store: Where pins live (shared when the store is).
        ttl: Seconds a pin lives after its last use.
        max_conversations: The most conversations pinned.
        clock: Wall clock (seconds), the walk's.
    """

    __slots__ = ("clock", "store", "ttl")

    def __init__(
        self,
        store: StateStore,
        *,
        ttl: float = DEFAULT_TTL_S,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.clock = clock
        store.limit_pins(max_conversations)

    def pinned(self, key: str) -> Pin | None:
        """The conversation's pin, while it lives."""
        return self.store.pinned(key, self.clock())

    def arrange(
        self,
        ordered: Sequence[str],
        pin: Pin | None,
        healthy: Callable[[str], bool],
        weights: Mapping[str, float],
    ) -> Sequence[str]:
        """``ordered`` (a pool's members in its strategy's order for this call) as this conversation tries them.

        Args:
            ordered: The members, as the pool's strategy put them.
            pin: The conversation's pin (None: a new conversation).
            healthy: Whether a member can serve now (not cooling down, breaker closed).
            weights: The members' weights (1 when not given).
        """
        if len(ordered) < 2:
            return ordered
        if pin is not None and pin.member in ordered and healthy(pin.member):
            if ordered[0] == pin.member:
                return ordered
            return [pin.member, *(m for m in ordered if m != pin.member)]
        counts = self.store.pin_counts(self.clock())
        live = sum(counts.get(m, 0) for m in ordered)
        if live < len(ordered):
            return ordered  # too few conversations for a share to mean anything
        total_weight = sum(max(weights.get(m, 1.0), 0.0) for m in ordered) or float(len(ordered))
        fits: list[str] = []
        over: list[str] = []
        for member in ordered:
            limit = max(weights.get(member, 1.0), 0.0) / total_weight + SHARE_MARGIN
            (over if (counts.get(member, 0) + 1) / (live + 1) > limit else fits).append(member)
        return [*fits, *over] if over and fits else ordered

    def served(self, key: str, member: str, key_index: int, pin: Pin | None = None) -> None:
        """``member`` served the conversation ``key`` with its key at ``key_index``: pin it there.

        ``pin``: the conversation's pin when the call began (kept, its life renewed, when the turn went there).
        """
        if pin is None or pin.member != member or pin.key != key_index:
            pin = Pin(member, key_index)
        self.store.pin(key, pin, now=self.clock(), ttl=self.ttl)
