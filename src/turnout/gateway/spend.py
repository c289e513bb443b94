"""Daily spend per client key, enforced from the ledger.

The ledger records every call with the name of the gateway key that made it, and knows, per key and UTC day,
the cost of the calls it was given and of those it wrote. At start-up, and then at most once per
:data:`REFRESH_S` while limited keys are in use, the book asks the ledger's writer for today's total per key in
the file (every worker process writes the same file) together with what this process had written of it when it
read; what a key spent is that total, plus what this process gave the ledger since minus what it had written.
So a call counts from the moment it ends until the file holds it, and after that through the file: never
twice, and never not at all, also while the file refuses writes (disk full, read-only, moved). The day is the
UTC day.

Calls still running are counted by their reservations (:meth:`SpendBook.reserve`), not by the ledger.
Attempts without a known price count as $0 (give such profiles a ``pricing`` table).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from turnout.embed_walk import embedding_cost
from turnout.estimate import estimate_embedding_tokens, estimate_tokens, output_bound
from turnout.gateway.shared_spend import SharedSpend
from turnout.ledger import Ledger, LedgerUnavailable
from turnout.router import Target
from turnout.types import ChatRequest, Message, ToolSpec, Usage

#: How stale the ledger's totals may be before the next admission of a limited key refreshes them.
REFRESH_S = 1.0
_DAY_S = 86400.0


def day_start(now: float) -> float:
    """00:00 UTC of the day ``now`` (Unix seconds) falls in."""
    return now - now % _DAY_S


def seconds_to_midnight(now: float | None = None) -> float:
    """Seconds until the next 00:00 UTC, when every daily limit resets."""
    now = time.time() if now is None else now
    return day_start(now) + _DAY_S - now


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Hold:
    """One call's reservation (compared by identity).

    Attributes:
        name: The key name.
        amount: The worst case it holds (USD).
        call_id: The call's id (the ledger's).
        shared: Whether the ledger file holds it too (every process writing the file sees it).
        redis: Whether Redis holds it (every host sees it; settled there when the call ends).
    """

    name: str
    amount: float
    call_id: str = ""
    shared: bool = False
    redis: bool = False


#: What :meth:`SpendBook.reserve` refuses for, besides the daily limit: the key's requests or tokens per minute.
RPM, TPM = "rpm", "tpm"


class SpendBook:
    """Today's spend per key name: the ledger file's totals plus this process's calls the file lacks.

    Args:
        ledger: The ledger the client writes every call to.
        clock: Wall-clock seconds (tests inject a fake).

    Attributes:
        readable: Whether the last refresh could read the file (False: the totals are the last ones read).
    """

    def __init__(
        self, ledger: Ledger, clock: Callable[[], float] = time.time, shared: SharedSpend | None = None
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.shared = shared
        self._minutes: dict[str, tuple[int, int, int]] = {}  # per key: (minute, requests, tokens), without Redis
        self._day = day_start(clock())
        self._totals: dict[str, float] = {}  # in the file, as of the last refresh
        self._written: dict[str, float] = {}  # of which this process wrote, as of the same moment
        self._refreshed = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self.readable = True
        self._holds: dict[str, dict[Hold, None]] = {}  # reservations of calls in flight, per key name

    def spent(self, name: str) -> float:
        """What ``name`` spent today, as far as is known now; starts a refresh when the totals are stale."""
        now = self.clock()
        if day_start(now) != self._day:
            self._day = day_start(now)
            self._totals, self._written = {}, {}
            self._refreshed = float("-inf")
        if now - self._refreshed >= REFRESH_S and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.refresh())
        unwritten = self.ledger.given(name, self._day) - self._written.get(name, 0.0)
        return self._totals.get(name, 0.0) + (unwritten if unwritten > 0.0 else 0.0)

    async def reserve(
        self,
        name: str,
        amount: float,
        limit: float,
        call_id: str,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        shared: bool = True,
    ) -> Hold | str | None:
        """Hold ``amount`` for call ``call_id`` of ``name`` while what it spent and holds is under ``limit``.

        Two checks, both must pass: this process's (what the book knows was spent, and its calls in flight: the
        check and the hold happen with no await between them, so concurrent calls cannot both take the last of a
        limit), then the ledger file's (every process writing the file: :meth:`turnout.ledger.Ledger.reserve`).
        When the file cannot take the reservation, this process's hold alone counts. The call's record, when it
        ends, replaces the hold (:meth:`release`). None: the limit is reached; :data:`RPM` or :data:`TPM`: the key's
        requests or tokens of this minute are used up.

        With Redis (``shared`` and a :class:`~turnout.gateway.shared_spend.SharedSpend`), Redis alone decides, for
        every host at once.

        Raises:
            SharedUnavailable: Redis did not answer (the caller applies ``on_ledger_failure``).
        """
        if shared and self.shared is not None:
            return await self._reserve_shared(name, amount, limit, call_id, rpm, tpm)
        if rpm is not None or tpm is not None:
            minute, requests, tokens = self._minute(name)
            if rpm is not None and requests >= rpm:
                return RPM
            if tpm is not None and tokens >= tpm:
                return TPM
        if self.spent(name) + self.reserved(name) >= limit:
            return None
        if rpm is not None or tpm is not None:
            minute, requests, tokens = self._minute(name)
            self._minutes[name] = (minute, requests + 1, tokens)
        local = Hold(name=name, amount=amount, call_id=call_id)
        holds = self._holds.setdefault(name, {})
        holds[local] = None
        try:
            shared = await self.ledger.reserve(call_id, name, amount, limit, self._day)
        except LedgerUnavailable:
            return local
        except BaseException:
            self.release(local)
            raise
        holds = self._holds.setdefault(name, {})
        holds.pop(local, None)
        if not shared:
            if not holds:
                self._holds.pop(name, None)
            return None
        hold = Hold(name=name, amount=amount, call_id=call_id, shared=True)
        holds[hold] = None
        return hold

    async def _reserve_shared(
        self, name: str, amount: float, limit: float, call_id: str, rpm: int | None, tpm: int | None
    ) -> Hold | str | None:
        shared = self.shared
        assert shared is not None
        if shared.stale:  # Redis missed some settles: raise this host's total to its ledger's first
            totals, _ = await self.ledger.spend_since(self._day)
            await shared.reconcile(totals, self._day)
        outcome = await shared.reserve(name, call_id, amount, limit, self._day, rpm, tpm)
        if outcome == 1:
            hold = Hold(name=name, amount=amount, call_id=call_id, redis=True)
            self._holds.setdefault(name, {})[hold] = None
            return hold
        return {-1: RPM, -2: TPM}.get(outcome)

    async def reconcile(self) -> None:
        """Raise this host's spend in Redis to what its ledger file holds today (start-up; never double counts).

        Raises:
            SharedUnavailable: Redis did not answer.
            LedgerUnavailable: The ledger could not be read.
        """
        if self.shared is not None:
            totals, _ = await self.ledger.spend_since(self._day)
            await self.shared.reconcile(totals, self._day)

    def _minute(self, name: str) -> tuple[int, int, int]:
        minute = int(self.clock() // 60)
        current = self._minutes.get(name)
        return current if current is not None and current[0] == minute else (minute, 0, 0)

    def release(self, hold: Hold, cost: float = 0.0, tokens: int = 0) -> None:
        """The call of ``hold`` ended and the ledger was given its record: its cost counts from there.

        ``cost`` and ``tokens`` are what the call spent (Redis counts them for every host; a key's ``tpm``).
        """
        if hold.shared:
            self.ledger.release(hold.call_id)
        if hold.redis and self.shared is not None:
            self.shared.settle(hold.name, hold.call_id, cost, tokens, self._day)
        elif tokens:
            minute, requests, used = self._minute(hold.name)
            self._minutes[hold.name] = (minute, requests, used + tokens)
        holds = self._holds.get(hold.name)
        if holds is not None:
            holds.pop(hold, None)
            if not holds:
                del self._holds[hold.name]

    def reserved(self, name: str) -> float:
        """What the calls of ``name`` in flight hold now."""
        return sum(h.amount for h in self._holds.get(name, ()))

    def holding(self, name: str) -> int:
        """How many calls of ``name`` hold a reservation now."""
        return len(self._holds.get(name, ()))

    async def refresh(self) -> None:
        """Read today's totals from the ledger file (through its writer, after what is queued)."""
        self._refreshed = self.clock()
        day = self._day
        try:
            totals, written = await self.ledger.spend_since(day)
        except LedgerUnavailable:  # the ledger logs its trouble; the last totals and every unwritten call count
            self.readable = False
        else:
            self.readable = True
            if day == self._day:
                self._totals, self._written = totals, written
        finally:
            self._task = None

    @property
    def recording(self) -> bool:
        """Whether the ledger can record now (its last write succeeded, and its file could be read)."""
        return self.ledger.health.ok and self.readable

    async def aclose(self) -> None:
        """Wait for a refresh in progress, and for Redis's settles (bounded)."""
        if self._task is not None:
            await asyncio.wait((self._task,))
        if self.shared is not None:
            await self.shared.aclose()


def ledger_status(ledger: Ledger | None, book: SpendBook | None, *, fail_closed: bool) -> dict[str, object] | None:
    """``/status``'s ``ledger`` field: whether it records, what went wrong, what waits (None: no ledger)."""
    if ledger is None:
        return None
    h = ledger.health
    return {
        "ok": h.ok and (book is None or book.readable),
        "problem": h.problem if h.problem is not None else (None if book is None or book.readable else "unreadable"),
        "errors": h.errors,
        "sanitised": h.sanitised,
        "pending_calls": h.pending,
        "since": round(h.since, 3),
        "on_failure": "closed" if fail_closed else "open",
    }


def keys_status(
    book: SpendBook | None, limits: Iterable[tuple[str, float | None, float | None, int | None, int | None]]
) -> list[dict[str, object]]:
    """``/status``'s ``keys``: each limited key's spend today, its limits and what its calls in flight reserve.

    Args:
        book: The spend book (None: no limits are enforced).
        limits: ``(name, daily_limit_usd, max_call_usd, rpm, tpm)`` of every key with a limit.
    """
    if book is None:
        return []
    out: list[dict[str, object]] = []
    for name, daily, per_call, rpm, tpm in limits:
        out.append(
            {
                "key": name,
                "spent_usd": round(book.spent(name), 6),
                "reserved_usd": round(book.reserved(name), 6),
                "in_flight": book.holding(name),
                "daily_limit_usd": daily,
                "max_call_usd": per_call,
                "rpm": rpm,
                "tpm": tpm,
            }
        )
    return out


def worst_case(target: Target, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int | None) -> float:
    """The most a call can cost on any entry of ``target``: its input (estimated) and its output bound, priced.

    The output bound is the request's ``max_tokens``, else the entry's profile ``max_tokens``, else
    :data:`turnout.estimate.DEFAULT_OUTPUT_BOUND`. An entry without a known price counts as $0.
    """
    request = ChatRequest(messages=tuple(messages), tools=tuple(tools), max_tokens=max_tokens)
    input_tokens = estimate_tokens(messages, tools)
    reliable = target.reliable
    worst = 0.0
    for entry in reliable.entries:
        usage = Usage(input_tokens=input_tokens, output_tokens=output_bound(request, entry.max_tokens))
        cost = reliable.context.cost(entry, entry.served_model(target.model), usage)
        if cost is not None and cost > worst:
            worst = cost
    return worst


def embedding_worst_case(target: Target, inputs: Sequence[str | Sequence[int]]) -> float:
    """The most an embedding call can cost on any entry of ``target``: its inputs' tokens (estimated), priced."""
    usage = Usage(input_tokens=estimate_embedding_tokens(inputs))
    reliable = target.reliable
    worst = 0.0
    for entry in reliable.entries:
        cost = embedding_cost(reliable.context.catalogue, entry, entry.served_model(target.model), usage)
        if cost is not None and cost > worst:
            worst = cost
    return worst
