"""Prompt caching as a deployment does it, so a client can rehearse it (opt-in: a script's ``[cache] ttl``).

With ``[cache] ttl = 300`` in the script, the simulator remembers the prompt prefixes it answered, per deployment
(this simulator, the model and the API key sent) for ``ttl`` seconds. A later request whose prompt starts with a
remembered prefix has that prefix's words reported as cached input in its protocol's field (OpenAI
``prompt_tokens_details.cached_tokens``, Responses ``input_tokens_details.cached_tokens``, Anthropic
``cache_read_input_tokens``, Gemini ``cachedContentTokenCount``); the rest of its prompt is written to the cache
(Anthropic reports it as ``cache_creation_input_tokens``). A step that fixes its own ``usage`` keeps it.

A prompt is read in blocks: the system prompt (``system``, ``instructions``, ``systemInstruction``) and the
tools, then each message (``messages``, ``input`` or ``contents`` items). A prefix is a run of whole blocks from
the start; its words are those of the ``text`` and ``content`` strings it holds (roles and ids are not words).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

#: The most prefixes remembered (the oldest go first beyond it).
MAX_PREFIXES = 100_000
_HEAD_FIELDS = ("system", "instructions", "systemInstruction", "tools")
_TURN_FIELDS = ("messages", "input", "contents")
_WORD_KEYS = frozenset(("text", "content", "system", "instructions"))


def _words(value: Any, counted: bool = False) -> int:
    """Words of the strings under a ``text`` or ``content`` key (or ``value`` itself when ``counted``)."""
    if isinstance(value, str):
        return len(value.split()) if counted else 0
    if isinstance(value, dict):
        return sum(_words(v, k in _WORD_KEYS) for k, v in value.items())
    if isinstance(value, list):
        return sum(_words(v, counted) for v in value)
    return 0


def blocks(payload: dict[str, Any]) -> list[tuple[bytes, int]]:
    """The prompt's prefixes: for each block, the digest of every block up to it and their words so far."""
    parts: list[tuple[Any, int]] = []
    head = {name: payload[name] for name in _HEAD_FIELDS if name in payload}
    if head:
        parts.append((head, _words(head)))
    for name in _TURN_FIELDS:
        turns = payload.get(name)
        if isinstance(turns, str):
            parts.append((turns, len(turns.split())))
        elif isinstance(turns, list):
            parts.extend((turn, _words(turn, isinstance(turn, str))) for turn in turns)
    out: list[tuple[bytes, int]] = []
    digest = hashlib.blake2b(digest_size=16)
    words = 0
    for part, n in parts:
        digest.update(orjson.dumps(part, option=orjson.OPT_SORT_KEYS))
        words += n
        out.append((digest.copy().digest(), words))
    return out


class PromptCache:
    """The prefixes each deployment answered, each until its deadline.

    Args:
        clock: Seconds (the simulator's clock).
        max_prefixes: The most prefixes remembered.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, max_prefixes: int = MAX_PREFIXES) -> None:
        self._clock = clock
        self._max = max_prefixes
        self._seen: OrderedDict[tuple[object, bytes], float] = OrderedDict()

    def clear(self) -> None:
        """Forget every prefix (a reset or a new script)."""
        self._seen.clear()

    def observe(self, deployment: object, prompt: list[tuple[bytes, int]], ttl: float) -> tuple[int, int]:
        """The (cached, written) words of ``prompt`` on ``deployment``; remembers its prefixes for ``ttl`` seconds.

        Cached: the words of the longest remembered prefix; written: the rest of the prompt.
        """
        now = self._clock()
        cached = 0
        for digest, words in prompt:
            deadline = self._seen.get((deployment, digest))
            if deadline is None or deadline <= now:
                break
            cached = words
        total = prompt[-1][1] if prompt else 0
        for digest, _ in prompt:
            key = (deployment, digest)
            self._seen.pop(key, None)
            self._seen[key] = now + ttl  # a hit refreshes the prefix's lifetime, as providers do
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return cached, total - cached
