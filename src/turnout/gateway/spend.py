"""Daily spend per client key, enforced from the ledger.

The ledger records every call with the name of the gateway key that made it, and knows, per key and UTC day,
the cost of the calls it was given and of those it wrote. At start-up, and then at most once per
:data:`REFRESH_S` while limited keys are in use, the book asks the ledger's writer for today's total per key in
the file (every worker process writes the same file) together with what this process had written of it when it
read; what a key spent is that total, plus what this process gave the ledger since minus what it had written.
So a call counts from the moment it ends until the file holds it, and after that through the file: never
twice, and never not at all, also while the file refuses writes (disk full, read-only, moved). The day is the
UTC day.

Calls still running are counted by their reservations (:meth:`SpendBook.reserve`), not by the ledger. A call's
money has one owner: its ledger record. The book listens to the ledger (:class:`~turnout.ledger.writer.CallListener`):
when the record of a call that holds a reservation is given to the ledger, the reservation is settled with that
record's cost and tokens, in this process and in Redis, once. A request that ends before its call's record (a call
given up on, billed when its upstream try ends) keeps its reservation until the record comes
(:meth:`SpendBook.ended`); one whose call never began releases it at once.
Attempts without a known price count as $0 (give such profiles a ``pricing`` table); a key with a spend limit
is refused a call whose route reaches one (:attr:`WorstCase.unpriced`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from turnout.core.estimate import estimate_embedding_tokens, estimate_tokens, output_bound
from turnout.core.types import ChatRequest, Message, ToolSpec, Usage
from turnout.gateway.shared_spend import SharedSpend, SharedUnavailable
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger, LedgerUnavailable
from turnout.walk.embed import embedding_cost
from turnout.walk.entry import Entry
from turnout.walk.router import Target

log = logging.getLogger("turnout.gateway")

#: How stale the ledger's totals may be before the next admission of a limited key refreshes them.
REFRESH_S = 1.0
#: How long a reservation waits for the record of a call that began, after its request ended (seconds): a
#: backstop for a call that is never recorded; a call given up on is recorded when its upstream try ends.
LATE_RECORD_S = 900.0
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
        day: The UTC day it counts in (its start, Unix seconds).
    """

    name: str
    amount: float
    call_id: str = ""
    shared: bool = False
    redis: bool = False
    day: float = 0.0


@dataclass(slots=True)
class _Open:
    """A reservation whose call's record settles it, and whether its call began (a record of it will come)."""

    hold: Hold
    began: bool = False


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
        self._open: dict[str, _Open] = {}  # the same, by call id: settled by the call's record
        self._late: dict[str, float] = {}  # requests ended before their call's record: call id -> backstop
        self._names: set[str] = set()  # every key that reserved (whose unwritten spend a seed counts)
        if shared is not None:
            shared.totals = self.day_totals

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
        limit), then the ledger file's (every process writing the file: :meth:`turnout.ledger.writer.Ledger.reserve`).
        When the file cannot take the reservation, this process's hold alone counts. The call's record, when it
        ends, replaces the hold (:meth:`release`). None: the limit is reached; :data:`RPM` or :data:`TPM`: the key's
        requests or tokens of this minute are used up.

        With Redis (``shared`` and a :class:`~turnout.gateway.shared_spend.SharedSpend`), Redis alone decides, for
        every host at once.

        Raises:
            SharedUnavailable: Redis did not answer (the caller applies ``on_ledger_failure``).
        """
        if self._late:
            self._sweep()
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
        local = Hold(name=name, amount=amount, call_id=call_id, day=self._day)
        holds = self._holds.setdefault(name, {})
        holds[local] = None
        try:
            shared = await self.ledger.reserve(call_id, name, amount, limit, self._day)
        except LedgerUnavailable:
            return self._track(local)
        except BaseException:
            self.release(local)
            raise
        holds = self._holds.setdefault(name, {})
        holds.pop(local, None)
        if not shared:
            if not holds:
                self._holds.pop(name, None)
            return None
        hold = Hold(name=name, amount=amount, call_id=call_id, shared=True, day=self._day)
        holds[hold] = None
        return self._track(hold)

    async def _reserve_shared(
        self, name: str, amount: float, limit: float, call_id: str, rpm: int | None, tpm: int | None
    ) -> Hold | str | None:
        shared = self.shared
        assert shared is not None
        day = self._day
        # (a stale host, or a Redis whose data is not the one this host seeded, is seeded from the ledger first)
        outcome = await shared.reserve(name, call_id, amount, limit, day, rpm, tpm)
        if outcome != 1:
            return {-1: RPM, -2: TPM}.get(outcome)
        held = Hold(name=name, amount=amount, call_id=call_id, redis=True, day=day)
        self._holds.setdefault(name, {})[held] = None
        # The file holds it too, without a limit of its own (Redis decided): a process killed before the call's
        # record is written leaves it there, and the next start bills it at its worst case, which Redis is then
        # raised to (:meth:`reconcile`). Without the file the call still runs, counted in Redis alone.
        try:
            durable = await self.ledger.reserve(call_id, name, amount, math.inf, day)
        except LedgerUnavailable:
            durable = False
        except BaseException:
            self.release(held)
            raise
        if not durable:
            return self._track(held)
        hold = Hold(name=name, amount=amount, call_id=call_id, shared=True, redis=True, day=day)
        holds = self._holds[name]
        holds.pop(held, None)
        holds[hold] = None
        return self._track(hold)

    def _track(self, hold: Hold) -> Hold:
        """Keep ``hold`` until its call's record (or its request's end, when no call began) settles it."""
        self._open[hold.call_id] = _Open(hold)
        self._names.add(hold.name)
        return hold

    async def day_totals(self, day: float) -> dict[str, float] | None:
        """What this host's ledger holds per key for ``day`` (what Redis is seeded with; None: it cannot be read now).

        The file's totals, and this process's records the file lacks yet.
        """
        try:
            totals, written = await self.ledger.spend_since(day)
        except LedgerUnavailable:
            return None
        out = dict(totals)
        for name in self._names | set(totals):
            unwritten = self.ledger.given(name, day) - written.get(name, 0.0)
            if unwritten > 0.0:
                out[name] = out.get(name, 0.0) + unwritten
        return out

    # --- the seam with the ledger (CallListener) ---------------------------------------------------

    def opened(self, call_id: str) -> None:
        """Call ``call_id`` began: its record, when it is given to the ledger, settles its reservation."""
        pending = self._open.get(call_id)
        if pending is not None:
            pending.began = True

    def recorded(self, call: CallRecord, cost: float) -> None:
        """The ledger was given ``call``'s record: settle its reservation with the record's cost and tokens."""
        pending = self._open.get(call.call_id)
        if pending is None:
            return
        tokens = sum(a.usage.total_tokens for a in call.attempts if a.usage is not None)
        self.release(pending.hold, cost, tokens)

    def ended(self, hold: Hold) -> None:
        """The request of ``hold`` ended: without a call, the hold goes now; else it waits for the call's record."""
        pending = self._open.get(hold.call_id)
        if pending is None or pending.hold is not hold:  # settled already (its record came)
            return
        if not pending.began:
            self.release(hold)
            return
        self._late[hold.call_id] = time.monotonic() + LATE_RECORD_S

    def _sweep(self) -> None:
        """Release (at $0, loudly) the holds whose call was never recorded within :data:`LATE_RECORD_S`."""
        now = time.monotonic()
        while self._late:
            call_id, deadline = next(iter(self._late.items()))
            if deadline > now:
                return
            del self._late[call_id]
            pending = self._open.get(call_id)
            if pending is not None:
                log.error("turnout gateway: a call's record never came; its reservation is released")
                self.release(pending.hold)

    async def reconcile(self) -> None:
        """Raise this host's spend in Redis to what its ledger file holds today (start-up; never double counts).

        Raises:
            SharedUnavailable: Redis did not answer.
            LedgerUnavailable: The ledger could not be read.
        """
        if self.shared is not None:
            totals = await self.day_totals(self._day)
            if totals is None:
                raise LedgerUnavailable("the ledger could not be read")
            await self.shared.reconcile(totals, self._day)

    def _minute(self, name: str) -> tuple[int, int, int]:
        minute = int(self.clock() // 60)
        current = self._minutes.get(name)
        return current if current is not None and current[0] == minute else (minute, 0, 0)

    def release(self, hold: Hold, cost: float = 0.0, tokens: int = 0) -> None:
        """The call of ``hold`` ended and the ledger was given its record: its cost counts from there.

        ``cost`` and ``tokens`` are what the call spent (Redis counts them for every host; a key's ``tpm``).
        Releasing a hold a second time does nothing.
        """
        holds = self._holds.get(hold.name)
        if holds is None or hold not in holds:
            return
        self._open.pop(hold.call_id, None)
        self._late.pop(hold.call_id, None)
        if hold.shared:
            self.ledger.release(hold.call_id)
        if hold.redis and self.shared is not None:
            self.shared.settle(hold.name, hold.call_id, cost, tokens, hold.day)
        elif tokens:
            minute, requests, used = self._minute(hold.name)
            self._minutes[hold.name] = (minute, requests, used + tokens)
        holds.pop(hold, None)
        if not holds:
            del self._holds[hold.name]

    def reserved(self, name: str) -> float:
        """What the calls of ``name`` in flight hold now."""
        return sum(h.amount for h in self._holds.get(name, ()))

    def holding(self, name: str) -> int:
        """How many calls of ``name`` hold a reservation now."""
        return len(self._holds.get(name, ()))

    def held_view(self, name: str) -> tuple[float, int]:
        """What ``name``'s reservations hold (USD, how many): with Redis, every host's as Redis last said."""
        if self.shared is not None and name in self.shared.held_now:
            return self.shared.held_now[name]
        return self.reserved(name), self.holding(name)

    async def observe(self, names: Iterable[str]) -> None:
        """Ask Redis what it holds for each key in ``names`` now (for ``/status``; nothing when it does not answer)."""
        if self.shared is None:
            return
        try:
            for name in names:
                await self.shared.held(name, self._day)
        except SharedUnavailable:
            for name in names:  # this process's own view, rather than a figure Redis gave earlier
                self.shared.held_now.pop(name, None)

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
        held, holding = book.held_view(name)
        out.append(
            {
                "key": name,
                "spent_usd": round(book.spent(name), 6),
                "reserved_usd": round(held, 6),
                "in_flight": holding,
                "daily_limit_usd": daily,
                "max_call_usd": per_call,
                "rpm": rpm,
                "tpm": tpm,
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class WorstCase:
    """The most a call can cost on its route, and the entries of the route whose price is unknown.

    Attributes:
        amount: The highest cost among the route's priced entries (USD).
        unpriced: ``(profile, served model)`` of every entry without a known price (neither the profile's
            ``pricing`` nor the catalogue's), in the walk's order, each once: what the call would cost there could
            not be counted, so a key with a spend limit is refused the call (:meth:`Access.reserve
            <turnout.gateway.access.Access.reserve>`).
    """

    amount: float
    unpriced: tuple[tuple[str, str], ...] = ()


#: The usage :func:`unpriced_entries` prices with: whether an entry has a price does not depend on it.
_NO_USAGE = Usage()


def _priced(target: Target, usage_of: Callable[[Entry], Usage], embedding: bool) -> WorstCase:
    """The most ``usage_of(entry)`` costs on an entry of ``target``, and the entries without a price.

    Priced as a chat, or (``embedding``) as an embedding call. The one place that says which entries of a route
    are unpriced, for a call's reservation and for ``turnout check`` alike; the prices are the walk's own (the
    route's catalogue and its profiles' ``pricing``).
    """
    reliable = target.reliable
    context = reliable.context
    worst = 0.0
    unpriced: dict[tuple[str, str], None] = {}
    for entry in reliable.entries:
        served = entry.model_for(target.model)
        usage = usage_of(entry)
        if embedding:
            cost = embedding_cost(context.catalogue, entry, served, usage)
        else:
            cost = context.cost(entry, served, usage)
        if cost is None:
            unpriced[(entry.profile, served)] = None
        elif cost > worst:
            worst = cost
    return WorstCase(worst, tuple(unpriced))


def unpriced_entries(target: Target, *, embedding: bool = False) -> tuple[tuple[str, str], ...]:
    """``(profile, served model)`` of every entry of ``target`` without a known price, in order, each once.

    ``embedding``: priced as an embedding call (an input price is enough). What :func:`worst_case` and
    :func:`embedding_worst_case` report as :attr:`WorstCase.unpriced`.
    """
    return _priced(target, lambda _: _NO_USAGE, embedding).unpriced


def worst_case(
    target: Target,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    max_tokens: int | None,
    choices: int = 1,
) -> WorstCase:
    """The most a call can cost on any entry of ``target``: its input (estimated) and its output bound, priced.

    The output bound is the request's ``max_tokens``, else the entry's profile ``max_tokens``, else
    :data:`turnout.core.estimate.DEFAULT_OUTPUT_BOUND`. A request for ``choices`` answers (OpenAI Chat's ``n``) is
    priced as that many whole calls, input included: OpenAI bills the input once and the output of every choice, but a
    compatible upstream that is passed ``n`` may bill each choice as a request of its own. An entry without a known
    price adds nothing to the amount and is named in :attr:`WorstCase.unpriced`.
    """
    request = ChatRequest(messages=tuple(messages), tools=tuple(tools), max_tokens=max_tokens)
    input_tokens = estimate_tokens(messages, tools) * choices

    def usage_of(entry: Entry) -> Usage:
        return Usage(input_tokens=input_tokens, output_tokens=output_bound(request, entry.max_tokens) * choices)

    return _priced(target, usage_of, embedding=False)


def embedding_worst_case(target: Target, inputs: Sequence[str | Sequence[int]]) -> WorstCase:
    """The most an embedding call can cost on any entry of ``target``: its inputs' tokens (estimated), priced.

    An entry without a known input price adds nothing to the amount and is named in :attr:`WorstCase.unpriced`.
    """
    usage = Usage(input_tokens=estimate_embedding_tokens(inputs))
    return _priced(target, lambda _: usage, embedding=True)
