"""Whose signature a thinking block carries, and where it may be sent back.

A signed thinking block (Anthropic's ``thinking`` / ``redacted_thinking``, Gemini's ``thoughtSignature``) is
valid only at the provider that issued it: replayed to another one after a failover it makes that turn, and
every later one, a 400. The signing domain is the profile's family (``anthropic``, ``bedrock``, ``vertex``,
``gemini``, a compatible proxy's own name): its profiles share one API, and so one key to the signatures.

Provenance is kept where the signature travels. In the neutral types, :class:`~turnout.core.types.ReasoningDelta`
carries its ``signer`` and a tool call's ``extra`` the :data:`SIGNER_KEY` of the thinking before it; an
adapter sends back only what its own family signed. Through the gateway a client holds the signature, so the
gateway's Anthropic surface hands out a signature of any other family than the Anthropic API stamped with its
signer (:func:`stamp`: ``tn1!vertex!<signature>``, ``!`` being outside the signatures' base64); a signature
without a stamp is the Anthropic API's, as a client calling it directly holds it, and reaches the client
unchanged. On the way back :func:`replayable_thinking` reads the stamp: an entry of the signing family gets the
signature as issued, any other entry never sees the block. Where dropping blocks would leave an assistant turn
empty, their thinking text stays as plain text, as the alternation of turns needs the turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: ``ToolCall.extra`` key naming the family whose signatures the call's thinking blocks carry.
SIGNER_KEY = "thinking_signer"
_STAMP = "tn1!"
#: The family whose signatures travel without a stamp.
UNSTAMPED = "anthropic"
_SIGNED = {"thinking": "signature", "redacted_thinking": "data"}


def signer_of(profile: str) -> str:
    """The signing domain of a profile (``vertex.claude`` → ``vertex``)."""
    return profile.partition(".")[0]


def stamp(signer: str, signature: str) -> str:
    """``signature`` marked as issued by ``signer`` (the Anthropic API's, and an empty one, stay as they are)."""
    return f"{_STAMP}{signer}!{signature}" if signature and signer != UNSTAMPED else signature


def unstamp(value: str) -> tuple[str, str]:
    """The signer and the signature as issued (a value without a stamp: the Anthropic API's)."""
    if not value.startswith(_STAMP):
        return UNSTAMPED, value
    signer, sep, raw = value[len(_STAMP) :].partition("!")
    return (signer, raw) if sep and signer else (UNSTAMPED, value)


def mine(extra: Mapping[str, Any] | None, signer: str) -> bool:
    """Whether what a tool call's ``extra`` keeps signed may go back to ``signer`` (unknown provenance: yes)."""
    owner = extra.get(SIGNER_KEY) if extra else None
    return owner is None or owner == signer


def stamped_content(content: Any, signer: str) -> Any:
    """An Anthropic ``content`` list with every signed block's signature stamped by ``signer``."""
    if not isinstance(content, list) or not any(_signed_field(b) for b in content):
        return content
    out = []
    for block in content:
        field = _signed_field(block)
        value = block.get(field) if field else None
        out.append({**block, field: stamp(signer, value)} if field and isinstance(value, str) else block)
    return out


def replayable_thinking(messages: Sequence[Any], signer: str) -> list[Any] | None:
    """``messages`` with signed blocks kept only where ``signer`` issued them (None: nothing to change).

    A block ``signer`` issued goes back with its signature as issued; a block of another signer is left out,
    and an assistant turn left with nothing keeps the thinking text as a text block.
    """
    if not any(_foreign_or_stamped(m, signer) for m in messages):
        return None
    out: list[Any] = []
    for message in messages:
        if not _foreign_or_stamped(message, signer):
            out.append(message)
            continue
        kept: list[Any] = []
        dropped: list[str] = []
        for block in message["content"]:
            field = _signed_field(block)
            if field is None or not isinstance(block.get(field), str):
                kept.append(block)
                continue
            owner, raw = unstamp(block[field])
            if owner == signer:
                kept.append({**block, field: raw})
            elif isinstance(block.get("thinking"), str) and block["thinking"]:
                dropped.append(block["thinking"])
        if not kept:
            kept = [{"type": "text", "text": "\n\n".join(dropped) or "(thinking omitted)"}]
        out.append({**message, "content": kept})
    return out


def _signed_field(block: Any) -> str | None:
    return _SIGNED.get(block.get("type")) if isinstance(block, dict) else None  # type: ignore[arg-type]


def _foreign_or_stamped(message: Any, signer: str) -> bool:
    """Whether a message holds a signed block that ``signer`` did not issue, or one whose stamp must come off."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return False
    for block in content:
        field = _signed_field(block)
        value = block.get(field) if field is not None else None
        if isinstance(value, str) and value and (value.startswith(_STAMP) or signer != UNSTAMPED):
            return True
    return False
