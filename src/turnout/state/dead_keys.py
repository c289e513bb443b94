"""When a rejected credential is dead, and when it is tried again.

The one owner of that policy; the stores only keep (and, with Redis, share) the records it returns.

- A first authentication failure makes a key *suspected*: it stays in use, and the failure is forgotten
  after :data:`CONFIRM_WINDOW_S` unless another call confirms it. A second failure seen by the same call
  (the walk trying the key again for a fallback model) confirms nothing.
- A failure seen by another call confirms it: the key is *dead* and rests for :data:`PROBE_INTERVAL_S`.
- When the rest is over one request *probes* the key (others keep skipping it for :data:`PROBE_LEASE_S`).
  A probe that is rejected again makes the key dead for twice the previous rest, up to
  :data:`MAX_PROBE_INTERVAL_S`; a probe that is not rejected within its lease gives the key back.

Keys are known by their ids only (the first 8 hex digits of their SHA-256), never by their value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

#: How long a first rejection waits for a confirmation from another call.
CONFIRM_WINDOW_S = 600.0
#: The first rest of a dead key before one request probes it.
PROBE_INTERVAL_S = 60.0
#: The longest rest: each rejected probe doubles the rest up to this.
MAX_PROBE_INTERVAL_S = 3600.0
#: How long other requests skip a key while one request probes it.
PROBE_LEASE_S = 30.0
#: A dead key whose rest ended and that nobody probed is forgotten after this.
FORGET_AFTER_S = 86400.0

KeyState = Literal["healthy", "suspected", "dead", "probe_due", "probing"]
#: The states in which a key is dead (shown in ``/status`` and ``turnout status``).
DEAD_STATES: frozenset[KeyState] = frozenset({"dead", "probe_due", "probing"})


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyHealth:
    """What is known about the rejections of one credential.

    Attributes:
        key_id: The credential's id.
        since: When the first rejection (suspected) or the last confirmation (dead) was seen.
        witness: The call that saw the first rejection, while the key is suspected.
        strikes: Confirmations: 0 while suspected; n ≥ 1 when dead (the rest is the n-th interval).
        dead_until: When the rest ends and one request may probe the key.
        probe_until: The end of the current probe's lease (0 while no probe has started since the rest).
    """

    key_id: str
    since: float
    witness: str = ""
    strikes: int = 0
    dead_until: float = 0.0
    probe_until: float = 0.0

    def state(self, now: float) -> KeyState:
        """Where the key stands at ``now``."""
        if self.strikes == 0:
            return "suspected" if now < self.since + CONFIRM_WINDOW_S else "healthy"
        if now < self.dead_until:
            return "dead"
        if self.probe_until <= self.dead_until:
            return "probe_due" if now < self.dead_until + FORGET_AFTER_S else "healthy"
        return "probing" if now < self.probe_until else "healthy"

    def expires(self) -> float:
        """When this record stops meaning anything (a shared store drops it then)."""
        if self.strikes == 0:
            return self.since + CONFIRM_WINDOW_S
        if self.probe_until > self.dead_until:
            return self.probe_until
        return self.dead_until + FORGET_AFTER_S

    def probing(self, now: float) -> KeyHealth:
        """This record with a probe's lease taken at ``now``."""
        return replace(self, probe_until=now + PROBE_LEASE_S)

    def describe(self, now: float) -> dict[str, Any]:
        """The key's entry in ``/status`` and ``turnout status`` (no secret: the id only)."""
        return {
            "key_id": self.key_id,
            "state": self.state(now),
            "strikes": self.strikes,
            "dead_until": round(self.dead_until, 3),
            "remaining_seconds": round(max(self.dead_until - now, 0.0), 3),
            "probe_until": round(self.probe_until, 3) if self.probe_until > self.dead_until else None,
        }

    def encode(self) -> bytes:
        """The record as JSON (how a shared store keeps and announces it)."""
        return orjson.dumps(
            {
                "key_id": self.key_id,
                "since": self.since,
                "witness": self.witness,
                "strikes": self.strikes,
                "dead_until": self.dead_until,
                "probe_until": self.probe_until,
            }
        )


def decode(raw: bytes | str | None) -> KeyHealth | None:
    """A record from :meth:`KeyHealth.encode`; None for nothing or anything malformed."""
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
        if not (isinstance(data["key_id"], str) and data["key_id"].isalnum() and len(data["key_id"]) <= 64):
            return None  # not an id this project made
        return KeyHealth(
            key_id=str(data["key_id"]),
            since=float(data["since"]),
            witness=str(data["witness"]),
            strikes=int(data["strikes"]),
            dead_until=float(data["dead_until"]),
            probe_until=float(data["probe_until"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def describe_dead_keys(records: Iterable[KeyHealth], now: float) -> list[dict[str, Any]]:
    """The dead keys among ``records`` at ``now``, by id (``/status`` and ``turnout status``)."""
    return [h.describe(now) for h in sorted(records, key=lambda h: h.key_id) if h.state(now) in DEAD_STATES]


def rest_seconds(strikes: int) -> float:
    """The rest of a key confirmed dead ``strikes`` times: the interval, doubled per strike, capped."""
    return min(PROBE_INTERVAL_S * 2.0 ** (strikes - 1), MAX_PROBE_INTERVAL_S)


def rejected(current: KeyHealth | None, key_id: str, witness: str, now: float) -> KeyHealth:
    """The record after the provider rejected ``key_id`` in the call ``witness`` at ``now``."""
    state = current.state(now) if current is not None else "healthy"
    if current is None or state == "healthy":
        return KeyHealth(key_id=key_id, since=now, witness=witness)
    if state == "suspected":
        if witness == current.witness:
            return current  # the same call again: not a confirmation
        return KeyHealth(key_id=key_id, since=now, strikes=1, dead_until=now + rest_seconds(1))
    if state == "dead":
        return current  # a request that picked the key before it died
    strikes = current.strikes + 1  # the probe (or a request racing it) was rejected again
    return KeyHealth(key_id=key_id, since=now, strikes=strikes, dead_until=now + rest_seconds(strikes))


def supersedes(announced: KeyHealth, known: KeyHealth | None, now: float) -> bool:
    """Whether an announced record of a key replaces the one a process knows.

    A process writes its own changes to its mirror at once, and hears them announced later, after older
    announcements still on their way: those must not take the key back to where it was (a dead key seen as
    suspected again, a probe's lease forgotten). Every change moves a record forward in confirmations, then
    in its probe's lease, then in time, except a rejection after the key recovered, which starts again from
    suspected: so a record that has ended (``healthy`` now) is replaced by anything.
    """
    if known is None or known.state(now) == "healthy":
        return True
    order = (announced.strikes, announced.probe_until, announced.since)
    return order >= (known.strikes, known.probe_until, known.since)


def stronger(shared: KeyHealth | None, local: KeyHealth) -> KeyHealth:
    """Of two records of one key, the one that says more (more confirmations, then the later one)."""
    if shared is None or (local.strikes, local.since) > (shared.strikes, shared.since):
        return local
    return shared
