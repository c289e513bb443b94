"""The reply a caller gets: the answer, who served it, the fallback notice, and every attempt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.core.attribution import Attempt, FallbackNotice, RouteRef, total_cost
from turnout.core.types import ToolCall, Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """An accepted answer with its attribution.

    Attributes:
        text: The answer text.
        tool_calls: Tool calls the model requested.
        usage: Usage of the accepted attempt only (rejected attempts keep theirs in :attr:`attempts`).
        finish_reason: ``stop``, ``tool_calls``, ``length`` or ``content_filter``.
        reasoning: Reasoning text, when the provider exposed it.
        requested: The profile (``family.alias``) and model the caller asked for.
        served: The profile and model that produced this answer.
        fallback: The notice when another entry or model served; None for a direct answer or a pure retry.
        attempts: Every attempt of the call, in order (including cooldown skips and rejected answers).
        call_id: The id of this call in the ledger.
        native: The upstream's own answer body when the call was passed through in its protocol (see
            :attr:`turnout.core.types.ChatResponse.native`).
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    finish_reason: str | None
    reasoning: str | None
    requested: RouteRef
    served: RouteRef
    fallback: FallbackNotice | None
    attempts: tuple[Attempt, ...]
    call_id: str
    native: Mapping[str, Any] | None = None

    @property
    def notice(self) -> str | None:
        """The fallback notice to show a user: always across families, within one only when configured."""
        return self.fallback.text if self.fallback is not None and self.fallback.shown else None

    @property
    def cost_usd(self) -> float | None:
        """What the whole call cost: the sum over every attempt with a known price (None if none is known)."""
        return total_cost(self.attempts)

    @property
    def model(self) -> str:
        """The served model."""
        return self.served.model
