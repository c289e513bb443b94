"""Prompt-cache affinity: a conversation goes back to the pool member (and key) that served it last.

Providers cache prompt prefixes per deployment and per key, so a conversation that lands on another member at
each turn pays the full input price every time. This module owns the whole decision:

- **The conversation's key** (:func:`conversation_key`): the client's own name for it when it gives one (the
  library's ``cache_key=``, which the gateway fills from a session header, :func:`session_of`; else the body's
  ``prompt_cache_key``, ``user`` or ``metadata.user_id``, as the caller's wire request carries them), else
  a hash of its stable prefix: the system prompts, the first user message and the tools' names sorted, taken
  from Turnout's neutral :class:`~turnout.core.types.ChatRequest`, so the same conversation hashes the same whether it
  came as OpenAI Chat, Responses or Anthropic Messages; a long part by its length and its two ends
  (:data:`EDGE_CHARS`), so the key's cost does not grow with the prompt. Either way the key is a CRC-32
  (:func:`conversation_key`): no client text is kept.
- **The order** (:meth:`Affinity.arrange`): a pinned conversation's member goes first while it is healthy (its
  profile not cooling down, its breaker closed), the pool's strategy ordering the others; a new conversation (or
  one whose member is not healthy) takes the pool's strategy's order, except that a member holding more than its
  share of the live conversations (its weight's share plus :data:`SHARE_MARGIN`) goes after the others.
- **The pin** (:meth:`Affinity.served`): whichever member served the turn, a pool's member or a fallback, becomes
  the conversation's pin, with the key it used; so a conversation moves once when its member fails and then
  sticks. Pins live in the state store (bounded, expiring ``ttl`` after their last use; shared through Redis).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from turnout.core.types import ChatRequest, Message, TextPart
from turnout.state.base import StateStore
from turnout.state.pins import DEFAULT_MAX_CONVERSATIONS, Pin
from turnout.walk.entry import PoolOrder
from turnout.walk.stats import Stats

#: Seconds a pin lives after its last use by default (providers keep a cached prefix about 5 minutes).
DEFAULT_TTL_S = 300.0
#: How far above its weight's share of the live conversations a member may go before new ones go elsewhere.
SHARE_MARGIN = 0.25
#: The longest explicit conversation name read from a request (longer ones are cut before hashing).
MAX_NAME_CHARS = 512
#: Request headers that name a conversation, first found wins: a generic one, Claude Code's (from 2.1.86), and
#: Codex CLI's (``session_id`` and ``conversation_id`` carry the same id; newer releases send ``session-id``).
SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id", "session_id", "conversation_id")
#: A part of a prefix (the system prompts, the first user message, an image's URL, the tools' names) longer than
#: twice this many characters is hashed by this many from each end and its length, so the key's cost does not grow
#: with a prompt's length (a coding agent's 14 KB prompt and 20 tools: about 3 µs; a short one: about 0.6 µs).
EDGE_CHARS = 256
_crc32 = zlib.crc32
_RS = "\x1e"  # between two system prompts in a conversation's prefix

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

    The key is the same in every process: the CRC-32 of the conversation's name or prefix. It is not a
    cryptographic hash and need not be: two conversations whose CRCs agree (among the 10,000 conversations kept,
    some two do with a chance of about 1 in 100) only share a pin, one member; whoever knows a conversation's
    prefix has its key anyway. BLAKE2b cost about 0.6 % of a call more.

    Tools are keyed by their names alone: hashing their schemas meant encoding them as JSON on every call, which
    for a coding agent's 20 tools cost more than half the call.

    Args:
        request: The call's request.
        explicit: The caller's own name for the conversation (wins over everything in the request; default:
            the request's :attr:`~turnout.core.types.ChatRequest.cache_key`).
    """
    name = explicit or request.cache_key
    if name:
        text = f"n:session={name[:MAX_NAME_CHARS]}"
    elif (native := request.native) is not None and (named := _named(native.body)) is not None:
        text = "n:" + named
    else:
        system = ""
        first = ""
        for message in request.messages:
            role = message.role
            if role == "system":
                content = message.content
                prompt = content if isinstance(content, str) else _text(message)
                system = f"{system}{_RS}{prompt}" if system else prompt
            elif role == "user":
                content = message.content
                first = content if isinstance(content, str) else _text(message)
                break
        else:
            if not system:
                return None
        # The system prompts, the first user message, the tools' names sorted (each long one by its length and
        # its two ends), split by separators no prompt holds.
        if len(system) + len(first) > 2 * EDGE_CHARS:
            system, first = _ends(system), _ends(first)
        text = f"p:{system}\x1f{first}"
        if request.tools:
            text += "\x1d" + _ends(_RS.join(sorted([tool.name for tool in request.tools])))
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON allows one): hashed as it came
        data = text.encode("utf-8", "surrogatepass")
    return hex(_crc32(data))


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
    """A message's text, the same whichever protocol carried it (parts joined; an image by its URL's two ends)."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.text if isinstance(part, TextPart) else f"\x1c{_ends(part.url)}\x1c" for part in content)


def _ends(text: str) -> str:
    """``text`` when it is at most twice :data:`EDGE_CHARS` long, else its length and its two ends."""
    if len(text) <= 2 * EDGE_CHARS:
        return text
    return f"{len(text)}\x1c{text[:EDGE_CHARS]}\x1c{text[-EDGE_CHARS:]}"


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
        """The conversation's pin, while it lives (only read)."""
        return self.store.pinned(key, self.clock())

    def pin_for(self, key: str) -> Pin | None:
        """The conversation's pin, while it lives, renewed for :attr:`ttl`: a call of the conversation begins.

        A pin lives ``ttl`` after the last turn that read it, as a provider keeps a prefix after the last request
        that used it; :meth:`served` pins the conversation again only when the turn went elsewhere.
        """
        return self.store.pinned(key, self.clock(), self.ttl)

    def arrange(
        self,
        members: list[str],
        pin: Pin | None,
        healthy: Callable[[str], bool] | None,
        pool: PoolOrder,
        stats: Stats | None,
    ) -> Sequence[str]:
        """A pool's ``members`` (in configured order) in the order this conversation's call tries them.

        A healthy pinned member goes first and the pool's strategy orders the others (for every strategy that is
        the order the strategy would give them with the pinned member left out: each member's draw or rank is its
        own). Otherwise the strategy orders them all, then a member beyond its share goes after the others.

        Args:
            members: The pool's members, in configured order (the call's own list: it may be changed).
            pin: The conversation's pin (None: a new conversation).
            healthy: Whether a member can serve now (not cooling down, breaker closed; None: every member can).
            pool: The pool, whose strategy orders the members.
            stats: What the strategy reads (the walk's stats).
        """
        if pin is not None and len(members) > 1:
            member = pin.member
            if member in members and (healthy is None or healthy(member)):
                members.remove(member)
                return [member, *pool.arrange(members, stats)]
        ordered = pool.arrange(members, stats)
        if len(ordered) < 2:
            return ordered
        counts = self.store.pin_counts(self.clock())
        live = sum(counts.get(m, 0) for m in ordered)
        if live < len(ordered):
            return ordered  # too few conversations for a share to mean anything
        weights = pool.weights
        total_weight = sum(max(weights.get(m, 1.0), 0.0) for m in ordered) or float(len(ordered))
        fits: list[str] = []
        over: list[str] = []
        for member in ordered:
            limit = max(weights.get(member, 1.0), 0.0) / total_weight + SHARE_MARGIN
            (over if (counts.get(member, 0) + 1) / (live + 1) > limit else fits).append(member)
        return [*fits, *over] if over and fits else ordered

    def served(self, key: str, member: str, key_index: int, pin: Pin | None = None) -> None:
        """``member`` served the conversation ``key`` with its key at ``key_index``: pin it there.

        ``pin``: the conversation's pin when the call began (:meth:`pin_for`, which renewed it: nothing to do when the
        turn went there).
        """
        if pin is None or pin.member != member or pin.key != key_index:
            self.store.pin(key, Pin(member, key_index), now=self.clock(), ttl=self.ttl)
