"""Which ``anthropic-beta`` names each cloud serving Claude accepts.

The Anthropic API takes every beta it knows and ignores none: a name it does not know is a 400, so a
client's header passes to it unchanged. Vertex AI and Bedrock refuse betas they have not enabled
("invalid beta flag"; Vertex refuses the prompt-caching beta, caching there is generally available), so a
request failing over keeps only the names its target accepts and drops the rest: the feature falls away,
the call does not fail. The lists follow Anthropic's "Claude on Vertex AI" and "Claude on Amazon Bedrock"
pages and Google's and AWS's Claude feature tables; a beta missing here is dropped for that cloud.
"""

from __future__ import annotations

from collections.abc import Mapping

_SHARED = frozenset(
    {
        "computer-use-2024-10-22",
        "computer-use-2025-01-24",
        "computer-use-2025-11-24",
        "token-efficient-tools-2025-02-19",
        "interleaved-thinking-2025-05-14",
        "output-128k-2025-02-19",
        "context-1m-2025-08-07",
        "context-management-2025-06-27",
        "effort-2025-11-24",
        "tool-search-tool-2025-10-19",
    }
)

#: Cloud → the beta names it accepts (None: every name; the Anthropic API judges them itself).
ACCEPTED: Mapping[str, frozenset[str] | None] = {
    "anthropic": None,
    "vertex": _SHARED | {"fine-grained-tool-streaming-2025-05-14", "web-search-2025-03-05"},
    "bedrock": _SHARED | {"dev-full-thinking-2025-05-14", "tool-examples-2025-10-29"},
}


def accepted_betas(cloud: str, value: str) -> str | None:
    """The part of an ``anthropic-beta`` header ``cloud`` accepts (None: nothing is left to send)."""
    allowed = ACCEPTED.get(cloud, frozenset())
    if allowed is None:
        return value
    kept = [name for name in (n.strip() for n in value.split(",")) if name in allowed]
    return ",".join(kept) or None
