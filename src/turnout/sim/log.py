"""The simulator's request log: one entry per request, in arrival order.

An entry is recorded when the request arrives (outcome ``pending``) and settled when the answer is
over, so a test can see a request that is still being held (silence, stall) and later see how it
ended (``client_disconnected`` when the client went away).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from turnout.sim.behaviour import SimUsage

PENDING = "pending"
CLIENT_DISCONNECTED = "client_disconnected"
SERVER_CLOSED = "server_closed"
DEFAULT_MAX_ENTRIES = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class SimLogEntry:
    """One request the simulator received.

    Attributes:
        seq: Arrival number since start or reset, from 1.
        time: Wall-clock arrival time (seconds since the epoch).
        protocol: ``openai``, ``responses``, ``anthropic``, ``gemini``, ``ollama`` or ``azure``.
        path: The request path.
        model: The model asked for (Gemini: from the path; Azure: the deployment).
        attempt: The attempt number for this model (per model and key with ``attempts_per = "model_key"``).
        behaviour: The step's behaviour (``ok``, ``status``, ``cut``, ...).
        outcome: What happened: ``ok``, ``status:429``, ``cut``, ``stalled``, ``client_disconnected``,
            ``server_closed``, ``pending`` while the answer is in progress, ...
        stream: Whether the client asked for a stream.
        key_id: First 8 hex digits of the SHA-256 of the API key sent, or None without a key.
        prefill: Whether the last message was an assistant message (a prefill).
        usage: The final usage reported to the client, or None when none was sent.
        duration: Seconds from arrival until the answer was over (None while pending).
        delay: Seconds the step waited before the headers (or the first chunk of a stream): its ``delay``, or
            its ``tail`` when the draw said so.
    """

    seq: int
    time: float
    protocol: str
    path: str
    model: str
    attempt: int
    behaviour: str
    outcome: str
    stream: bool
    key_id: str | None
    prefill: bool
    usage: SimUsage | None
    duration: float | None
    delay: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``GET /_sim/log`` returns a list of these)."""
        usage = self.usage
        return {
            "seq": self.seq,
            "time": self.time,
            "protocol": self.protocol,
            "path": self.path,
            "model": self.model,
            "attempt": self.attempt,
            "behaviour": self.behaviour,
            "outcome": self.outcome,
            "stream": self.stream,
            "key_id": self.key_id,
            "prefill": self.prefill,
            "usage": None
            if usage is None
            else {
                "input": usage.input,
                "output": usage.output,
                "cached_input": usage.cached_input,
                "cache_write": usage.cache_write,
                "reasoning": usage.reasoning,
            },
            "duration": self.duration,
            "delay": self.delay,
        }


class Record:
    """The mutable record of a request in progress; the log turns it into a :class:`SimLogEntry`."""

    __slots__ = (
        "attempt",
        "behaviour",
        "delay",
        "duration",
        "key_id",
        "model",
        "outcome",
        "path",
        "prefill",
        "protocol",
        "seq",
        "started",
        "stream",
        "time",
        "usage",
    )

    def __init__(
        self,
        *,
        seq: int,
        time: float,
        started: float,
        protocol: str,
        path: str,
        model: str,
        attempt: int,
        behaviour: str,
        stream: bool,
        key_id: str | None,
        prefill: bool,
    ) -> None:
        self.seq = seq
        self.time = time
        self.started = started
        self.protocol = protocol
        self.path = path
        self.model = model
        self.attempt = attempt
        self.behaviour = behaviour
        self.stream = stream
        self.key_id = key_id
        self.prefill = prefill
        self.outcome = PENDING
        self.usage: SimUsage | None = None
        self.duration: float | None = None
        self.delay = 0.0

    def entry(self) -> SimLogEntry:
        """A frozen snapshot."""
        return SimLogEntry(
            seq=self.seq,
            time=self.time,
            protocol=self.protocol,
            path=self.path,
            model=self.model,
            attempt=self.attempt,
            behaviour=self.behaviour,
            outcome=self.outcome,
            stream=self.stream,
            key_id=self.key_id,
            prefill=self.prefill,
            usage=self.usage,
            duration=self.duration,
            delay=self.delay,
        )


class SimLog:
    """Arrival-ordered records, bounded to the last ``max_entries`` requests."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._records: deque[Record] = deque(maxlen=max_entries)
        self._seq = 0
        self._changed: asyncio.Event | None = None

    def add(self, record: Record) -> None:
        """Append a new (pending) record; wakes :meth:`wait_for`."""
        self._records.append(record)
        self.changed()

    def next_seq(self) -> int:
        """The arrival number for the next request."""
        self._seq += 1
        return self._seq

    def changed(self) -> None:
        """Note that the records changed; wakes :meth:`wait_for`."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def clear(self) -> None:
        """Forget every record and restart arrival numbers."""
        self._records = deque(maxlen=self._records.maxlen)
        self._seq = 0
        self.changed()

    def entries(self) -> list[SimLogEntry]:
        """Snapshots of every record, in arrival order."""
        return [r.entry() for r in self._records]

    async def wait_for(self, count: int, within: float, *, settled: bool = True) -> list[SimLogEntry]:
        """Wait until at least ``count`` requests are logged and (when ``settled``) none of them is pending.

        Raises:
            TimeoutError: That did not happen within ``within`` seconds.
        """
        async with asyncio.timeout(within):
            while True:
                entries = self.entries()
                if len(entries) >= count and (not settled or all(e.outcome != PENDING for e in entries[:count])):
                    return entries
                if self._changed is None:
                    self._changed = asyncio.Event()
                await self._changed.wait()
