"""The state-store interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from turnout.state.dead_keys import KeyHealth, describe_dead_keys
from turnout.state.pins import Pin


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerRecord:
    """An open breaker, as the state store keeps it.

    Attributes:
        opened_at: When it (last) opened (Unix seconds).
        until: When a probe may try the entry again.
        interval: How long it stays open this time (doubles after a failed probe).
    """

    opened_at: float
    until: float
    interval: float

    def encode(self) -> str:
        """The record as a shared store keeps it: ``"opened_at until interval"``."""
        return f"{self.opened_at!r} {self.until!r} {self.interval!r}"

    @classmethod
    def decode(cls, text: str | bytes | None) -> BreakerRecord | None:
        """A record from :meth:`encode`'s form (None for anything else)."""
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        try:
            opened_at, until, interval = (float(part) for part in (text or "").split(" "))
        except ValueError:
            return None
        return cls(opened_at=opened_at, until=until, interval=interval)


class StateStore(ABC):
    """Cooldowns, rejected credentials, open breakers, conversations' pins and values kept a while (:meth:`keep`).

    Cooldowns are keyed ``family.alias`` or ``family.alias#<key id>``, rejected credentials by key id, breakers
    by entry (``family.alias/model``). Deadlines are wall-clock Unix seconds so several processes can share them.
    """

    @abstractmethod
    def cooldown_until(self, key: str, now: float) -> float | None:
        """The end of ``key``'s cooldown, or None when it is not cooling down at ``now``."""

    @abstractmethod
    async def set_cooldown(self, key: str, until: float, *, since: float | None = None) -> None:
        """Cool ``key`` down until ``until`` (keeps a later existing deadline), from ``since`` when known."""

    @abstractmethod
    def cooldown_since(self, key: str) -> float | None:
        """When ``key``'s current cooldown began (None: not cooling, or not known)."""

    @abstractmethod
    async def clear_cooldown(self, key: str) -> None:
        """End ``key``'s cooldown now."""

    @abstractmethod
    def cooldowns(self, now: float) -> dict[str, float]:
        """Every active cooldown: key → deadline."""

    @abstractmethod
    def key_health(self, key_id: str) -> KeyHealth | None:
        """What is known about a credential's rejections (None: nothing; read on every pick, so no I/O)."""

    @abstractmethod
    async def report_auth_failure(self, key_id: str, *, witness: str, now: float) -> KeyHealth:
        """Record that the provider rejected a credential in the call ``witness``; returns the new record.

        The policy (suspected, confirmed dead by another call, probed after a rest) is
        :func:`turnout.state.dead_keys.rejected`; the store keeps the records, and a shared store shares them.
        """

    @abstractmethod
    def claim_probe(self, key_id: str, now: float) -> bool:
        """Take the one probe of a dead key whose rest is over; False when it is not due or already taken."""

    @abstractmethod
    def key_records(self) -> list[KeyHealth]:
        """Every record of a rejected credential (some may describe keys that are healthy again)."""

    @abstractmethod
    def breaker(self, key: str) -> BreakerRecord | None:
        """The open breaker of the entry ``key`` (None: closed; read on every walk, so no I/O)."""

    @abstractmethod
    async def open_breaker(self, key: str, record: BreakerRecord) -> None:
        """Open (or reopen) the breaker of the entry ``key`` as ``record`` says."""

    @abstractmethod
    async def close_breaker(self, key: str) -> None:
        """Close the breaker of the entry ``key`` (its probe, if any, is over)."""

    @abstractmethod
    async def claim_breaker_probe(self, key: str, now: float, hold: float) -> bool:
        """Take the one probe of the entry ``key``, for at most ``hold`` seconds; False when another has it.

        One claimant wins, across every process sharing the store.
        """

    @abstractmethod
    def breakers(self) -> dict[str, BreakerRecord]:
        """Every open breaker: entry key → record."""

    @abstractmethod
    def pinned(self, key: str, now: float, renew: float | None = None) -> Pin | None:
        """Where the conversation ``key`` was served last, while its pin lives (read on every pooled walk: no I/O).

        ``renew``: the pin found lives ``renew`` seconds from ``now`` on, as :meth:`pin` would pin it again (a
        shared store shares that; None: the pin is only read).
        """

    @abstractmethod
    def pin(self, key: str, pin: Pin, *, now: float, ttl: float) -> None:
        """Pin the conversation ``key`` to ``pin`` for ``ttl`` seconds from ``now`` (a shared store shares it)."""

    @abstractmethod
    def pin_counts(self, now: float) -> dict[str, int]:
        """Live pinned conversations per member (``family.alias``)."""

    @abstractmethod
    def limit_pins(self, limit: int) -> None:
        """Keep at most ``limit`` conversations' pins (the least recently used go first)."""

    @abstractmethod
    async def keep(self, key: str, value: bytes, ttl: float) -> None:
        """Keep ``value`` under ``key`` for ``ttl`` seconds, where every process sharing the store finds it.

        For the gateway's Responses conversations; never raises (a shared store that cannot reach its backend
        keeps it in this process).
        """

    @abstractmethod
    async def kept(self, key: str) -> bytes | None:
        """The value kept under ``key`` (None: none, or expired)."""

    def dead_keys(self, now: float) -> list[dict[str, Any]]:
        """The dead keys at ``now``, by id, with their rest and probe (for ``/status`` and ``turnout status``)."""
        return describe_dead_keys(self.key_records(), now)

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load the shared state before the first call (a store kept in this process has none to load).

        Bounded in time and never raises: a store that cannot reach its backend goes on with the local view.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections (bounded in time)."""
