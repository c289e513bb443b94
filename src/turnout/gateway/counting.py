"""Token counts the gateway gives before (or without) an upstream's own count: a documented estimate.

About four characters of text per token, plus a few tokens per message: close enough for a client that
budgets its context (Claude Code, the Anthropic SDK's ``count_tokens``), never used for billing. Wherever
the gateway answers with this estimate it says so (``x-turnout-token-count: estimate``); the upstream's
own count is used whenever the served upstream has one.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from turnout.types import Message, ToolSpec

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """An estimate of the input tokens of a prompt (at least 1)."""
    chars = 0
    for m in messages:
        chars += len(m.text)
        for call in m.tool_calls:
            chars += len(call.name) + len(call.arguments)
        chars += 85 * 4 * len(m.images)  # an image costs about as much as 85 tokens at the least
    for t in tools:
        chars += len(t.name) + len(t.description) + len(orjson.dumps(dict(t.parameters)))
    return max(1, -(-chars // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages))
