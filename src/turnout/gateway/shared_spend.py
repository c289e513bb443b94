"""Spend limits shared by every worker and every host through Redis (``[state] backend = "redis"``).

Each limited key's day lives in Redis, keyed by the UTC day, and changes only by atomic scripts:

- **reserve**: drop expired reservations, sum the day's settled spend (one field per host) and the
  reservations in flight; refuse when that reached the limit, or when the key's ``rpm`` requests or ``tpm``
  tokens of the current minute are used up; else hold the call's worst case (a field of a hash, with its
  expiry in a sorted set) and count the request.
- **settle**: replace the call's reservation by its cost in this host's field, and add its tokens to the
  minute's count, in one step, once: a settle that finds no reservation (sent twice, or the reservation is gone)
  counts nothing, and the host's field is raised from its ledger instead (below).
- **seed**: raise this host's field of each key to what its ledger holds for the day (never lower it), and
  read (or create) the marker of Redis's data (below).

A reservation is a **lease**: it expires :data:`RESERVATION_TTL_S` after it was last renewed, and the process
that holds it renews it every :data:`RENEW_S` while the call runs. A process that died (whatever its PID is
now, in a container or after a reboot) stops renewing, and its reservations stop counting within the lease.

A settle Redis does not answer (unreachable, paused, or no connection free in time) is kept (at most
:data:`MAX_UNSETTLED`) and sent again every :data:`WATCH_S` until Redis takes it: no reservation outlives a failed
settle by more than that (and none by more than its lease).

**Redis restarted empty.** A marker key (``epoch``, without expiry) names Redis's current data. Every host
remembers the marker it seeded and checks it every :data:`WATCH_S`, and a reservation names it: when it is
missing or another, the host first raises its fields from its ledger (seed). A host that finds the marker it knew
gone creates a new one and, with it, a seeding window of :data:`SEED_WINDOW_S` during which no host reserves:
every live host notices within :data:`WATCH_S` and seeds its spend before Redis admits again.

The ledger stays each host's record. A host is its name and its ledger file: the workers of a host share one
field. Redis unreachable: :class:`SharedUnavailable`, and limited keys follow ``[gateway] on_ledger_failure``.
Every connection is taken from a pool of a fixed size (:func:`pool_size`); a command waits up to
:data:`POOL_WAIT_S` for one, then fails with :class:`SharedBusy`: Redis is healthy, this process is too busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("turnout.gateway")

#: How long a reservation in Redis holds unless the process that holds it renews it (seconds).
RESERVATION_TTL_S = 30.0
#: How often a process renews the reservations of its calls in flight (seconds).
RENEW_S = 10.0
#: How often a process sends the settles Redis missed again and checks Redis's marker (seconds).
WATCH_S = 0.5
#: How long no host reserves after a host found Redis's data gone (seconds): every host seeds its spend first.
SEED_WINDOW_S = 2.0
#: Seconds one Redis command may take.
COMMAND_TIMEOUT_S = 1.0
#: Seconds a command waits for a free connection of the pool.
POOL_WAIT_S = 2.0
#: The most settles kept for Redis while it does not answer (beyond: the oldest are dropped, and raised in from
#: the ledger instead).
MAX_UNSETTLED = 100_000
_DAY_KEY_TTL_S = 2 * 86400
_MINUTE_KEY_TTL_S = 120

_RESERVE = """
local e = redis.call('HGET', KEYS[6], 'id')
if (not e) or e ~= ARGV[10] then return -3 end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[4])
for _, id in ipairs(expired) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[4])
local spent = 0
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do spent = spent + tonumber(v) end
local held = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do held = held + tonumber(v) end
if spent + held >= tonumber(ARGV[3]) then return 0 end
local rpm = tonumber(ARGV[7])
if rpm > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= rpm then return -1 end
local tpm = tonumber(ARGV[8])
if tpm > 0 and tonumber(redis.call('GET', KEYS[5]) or '0') >= tpm then return -2 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[6])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('INCR', KEYS[4])
redis.call('EXPIRE', KEYS[4], ARGV[9])
return 1
"""
_SETTLE = """
local held = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if held == 0 then return 0 end
if tonumber(ARGV[3]) > 0 then
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[2], ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
if tonumber(ARGV[4]) > 0 then
  redis.call('INCRBY', KEYS[4], ARGV[4])
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
return 1
"""
_SEED = """
for i = 2, #KEYS do
  local cost = ARGV[i + 3]
  local current = tonumber(redis.call('HGET', KEYS[i], ARGV[3]) or '0')
  if tonumber(cost) > current then
    redis.call('HSET', KEYS[i], ARGV[3], cost)
    redis.call('EXPIRE', KEYS[i], ARGV[4])
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'id', ARGV[1], 'since', ARGV[2]) end
return redis.call('HMGET', KEYS[1], 'id', 'since')
"""
_RENEW = """
local n = 0
for i = 2, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[2], ARGV[1], ARGV[i])
    n = n + 1
  end
end
return n
"""
_HELD = """
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
for _, id in ipairs(expired) do redis.call('HDEL', KEYS[1], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
local held = 0
local values = redis.call('HVALS', KEYS[1])
for _, v in ipairs(values) do held = held + tonumber(v) end
return {tostring(held), #values}
"""
_SCRIPTS = {"reserve": _RESERVE, "settle": _SETTLE, "seed": _SEED, "renew": _RENEW, "held": _HELD}

#: What a key's day totals come from: the host's ledger, per key, for the UTC day starting at the argument
#: (None: the ledger cannot be read now).
Totals = Callable[[float], Awaitable[dict[str, float] | None]]


class SharedUnavailable(Exception):
    """Redis could not answer: the shared limit cannot be checked now."""


class SharedBusy(SharedUnavailable):
    """No connection of the pool came free within :data:`POOL_WAIT_S`: Redis is fine, this process is overloaded."""


def pool_size(max_connections: int) -> int:
    """The Redis connections of one process, from the gateway's connection cap (``[gateway] max_connections``).

    A reservation or a settle holds a connection for one round trip, so an eighth of the requests the gateway may
    serve at once, between 16 and 256, keeps the queue short; a burst beyond it waits (:data:`POOL_WAIT_S`).
    """
    return max(16, min(256, max_connections // 8))


def _day_number(day: float) -> int:
    return int(day // 86400)


class SharedSpend:
    """A key's day (spend, reservations, requests and tokens per minute) in Redis, shared by every host.

    Args:
        url: The Redis URL (``[state] url``).
        prefix: The key prefix (``[state] key_prefix``).
        ledger_path: This host's ledger file (it names the host's field with the host name).
        clock: Wall-clock seconds.
        max_connections: The size of the connection pool (see :func:`pool_size`).
        seed_window: Seconds no host reserves after Redis's data was found gone (:data:`SEED_WINDOW_S`).

    Attributes:
        totals: What this host's ledger holds per key for a day (set by the spend book; None: nothing to seed).
        errors: Commands Redis did not answer.
        busy: Commands that found no free connection in time.
        dropped: Settles given up (beyond :data:`MAX_UNSETTLED`).
        stale: Some spend of this host may be missing in Redis: the next reservation seeds from the ledger first.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        ledger_path: str | Path,
        clock: Callable[[], float] = time.time,
        max_connections: int = 64,
        seed_window: float = SEED_WINDOW_S,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.clock = clock
        self.max_connections = max_connections
        self.seed_window = seed_window
        digest = hashlib.sha256(str(Path(ledger_path).absolute()).encode()).hexdigest()[:12]
        self.host = f"{socket.gethostname()}:{digest}"
        self.totals: Totals | None = None
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._settling: set[asyncio.Task[None]] = set()
        #: Settles Redis has not taken yet, by call id: (key, cost, tokens, day), oldest first.
        self._unsettled: dict[str, tuple[str, float, int, float]] = {}
        self._sending: set[str] = set()
        self._flushed = asyncio.Event()  # set while nothing is kept for Redis
        self._flushed.set()
        #: This process's reservations in Redis, per (key, day): renewed while their calls run.
        self._held: dict[tuple[str, float], dict[str, None]] = {}
        self._known: str | None = None  # the marker of Redis's data this host seeded
        self._seeding = asyncio.Lock()  # one seed at a time: concurrent reservations wait for it, not repeat it
        self._ready_at = float("-inf")  # no reservation before (a seeding window)
        self._renewed = float("-inf")
        self._watch: asyncio.Task[None] | None = None
        #: What Redis held for each key when last asked: (USD, reservations).
        self.held_now: dict[str, tuple[float, int]] = {}
        self.errors = 0
        self.busy = 0
        self.dropped = 0
        self.reachable = True
        self.stale = False

    # --- Redis ---------------------------------------------------------------------------------

    def _client(self) -> Any:
        if self._redis is None:
            # imported here: redis pulls in OpenTelemetry when it is installed, which a gateway without the Redis
            # backend (or without tracing) must not import
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import ConnectionError as RedisConnectionError

            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=self.max_connections,
                timeout=POOL_WAIT_S,
                socket_connect_timeout=COMMAND_TIMEOUT_S,
                socket_timeout=COMMAND_TIMEOUT_S,
                # one more try on a connection that broke (Redis restarted), none on a timeout: a command that
                # Redis did not answer within COMMAND_TIMEOUT_S fails, and a settle is sent again by the watch
                # (redis-py 5 retries only errors that are also named in retry_on_error)
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                retry_on_error=[RedisConnectionError],
            )
            self._redis = aioredis.Redis.from_pool(pool)  # closing the client closes its pool
            for name, text in _SCRIPTS.items():
                self._scripts[name] = self._redis.register_script(text)
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watching())
        return self._redis

    def _keys(self, caller: str, day: float, minute: int) -> list[str]:
        d = _day_number(day)
        p = self.prefix
        return [
            f"{p}spend:{d}:{caller}",
            f"{p}resv:{d}:{caller}",
            f"{p}resvx:{d}:{caller}",
            f"{p}rpm:{minute}:{caller}",
            f"{p}tpm:{minute}:{caller}",
        ]

    @property
    def _epoch_key(self) -> str:
        return f"{self.prefix}epoch"

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run one script on a connection of the pool (waiting at most :data:`POOL_WAIT_S` for one)."""
        from redis.exceptions import NoScriptError, RedisError

        self._client()
        try:
            async with asyncio.timeout(POOL_WAIT_S):
                await self._slots.acquire()
        except TimeoutError:
            self.busy += 1
            log.warning("turnout gateway: every Redis connection of the spend limits is busy (pool full)")
            raise SharedBusy("no Redis connection free") from None
        try:
            try:
                result = await self._scripts[script](keys=keys, args=args)
            except NoScriptError:  # Redis restarted between loading the script and running it: once more
                result = await self._scripts[script](keys=keys, args=args)
        except (RedisError, OSError) as exc:
            self.errors += 1
            if self.reachable:
                log.error("turnout gateway: Redis unreachable for spend limits (%s)", type(exc).__name__)
            self.reachable = False
            raise SharedUnavailable(type(exc).__name__) from exc
        finally:
            self._slots.release()
        if not self.reachable:
            log.warning("turnout gateway: Redis reachable again for spend limits")
        self.reachable = True
        return result

    # --- reservations --------------------------------------------------------------------------

    async def reserve(
        self, caller: str, call_id: str, amount: float, limit: float, day: float, rpm: int | None, tpm: int | None
    ) -> int:
        """Reserve ``amount`` for ``call_id``: 1 reserved, 0 the daily limit is reached, -1 rpm, -2 tpm.

        Seeds this host's spend first when Redis's data is not the one it seeded (or some of its spend may be
        missing there), and waits out a seeding window.

        Raises:
            SharedUnavailable: Redis did not answer (:class:`SharedBusy`: no connection came free in time).
        """
        for _ in range(3):  # a marker that changes again meanwhile: seed again
            if self.stale or self._known is None:
                async with self._seeding:
                    if self.stale or self._known is None:  # not done meanwhile by another reservation
                        await self.reseed(day)
            wait = self._ready_at - self.clock()
            if wait > 0:  # a seeding window: the other hosts raise their spend first
                await asyncio.sleep(min(wait, self.seed_window))
            now = self.clock()
            keys = [*self._keys(caller, day, int(now // 60)), self._epoch_key]
            args = [call_id, repr(amount), repr(limit), repr(now), repr(now + RESERVATION_TTL_S), _DAY_KEY_TTL_S]
            args += [rpm or 0, tpm or 0, _MINUTE_KEY_TTL_S, self._known or ""]
            outcome = int(await self._run("reserve", keys, args))
            if outcome != -3:
                if outcome == 1:
                    self._held.setdefault((caller, day), {})[call_id] = None
                return outcome
            self.stale = True  # Redis's data is not what this host seeded
        raise SharedUnavailable("Redis's data changed while seeding")

    async def reseed(self, day: float, totals: dict[str, float] | None = None) -> None:
        """Raise this host's field of each key to what its ledger holds for ``day`` (never lower it); take the marker.

        The marker of Redis's data is created when missing, with a seeding window when the one this host knew is gone.
        ``totals``: what to raise the fields to (default: :attr:`totals`, the ledger's).

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        if totals is None and self.totals is not None:
            totals = await self.totals(day)
            unreadable = totals is None
        else:
            unreadable = False
        now = self.clock()
        # the marker this host knew is gone: Redis lost its data, and the other hosts must seed before it admits
        since = now if self._known is not None else now - self.seed_window
        pending: dict[str, float] = {}  # settles not taken yet add their cost themselves when they are
        for caller, cost, _, on in self._unsettled.values():
            if on == day:
                pending[caller] = pending.get(caller, 0.0) + cost
        callers = sorted((c, cost - pending.get(c, 0.0)) for c, cost in (totals or {}).items())
        keys = [self._epoch_key, *(self._keys(c, day, 0)[0] for c, _ in callers)]
        args = [os.urandom(8).hex(), repr(since), self.host, _DAY_KEY_TTL_S, *(repr(cost) for _, cost in callers)]
        marker, since_text = await self._run("seed", keys, args)
        known = marker.decode() if isinstance(marker, bytes) else str(marker)
        if known != self._known and self._known is not None:
            log.warning("turnout gateway: Redis's spend data was lost; this host's spend is raised from its ledger")
        self._known = known
        self._ready_at = float(since_text) + self.seed_window
        self.stale = unreadable  # an unreadable ledger: seed again next time

    async def reconcile(self, totals: dict[str, float], day: float) -> None:
        """Raise this host's field of each key to ``totals`` for ``day`` (never lower it; see :meth:`reseed`).

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        await self.reseed(day, totals)

    async def held(self, caller: str, day: float) -> tuple[float, int]:
        """What Redis holds for ``caller`` now (every host's reservations): USD and how many.

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        keys = self._keys(caller, day, 0)
        amount, count = await self._run("held", [keys[1], keys[2]], [repr(self.clock())])
        out = (float(amount), int(count))
        self.held_now[caller] = out
        return out

    # --- settles -------------------------------------------------------------------------------

    def settle(self, caller: str, call_id: str, cost: float, tokens: int, day: float) -> None:
        """Replace ``call_id``'s reservation by its cost and count its tokens (in the background, until taken)."""
        held = self._held.get((caller, day))
        if held is not None:
            held.pop(call_id, None)
            if not held:
                del self._held[(caller, day)]
        self._unsettled[call_id] = (caller, cost, tokens, day)
        self._flushed.clear()
        if len(self._unsettled) > MAX_UNSETTLED:  # the oldest go; the ledger raises their cost in
            oldest = next(iter(self._unsettled))
            del self._unsettled[oldest]  # (never the one just added: the bound is far above one)
            self.dropped += 1
            self.stale = True
        task = asyncio.get_running_loop().create_task(self._send(call_id))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _send(self, call_id: str) -> None:
        """Send one kept settle; it stays kept when Redis does not take it."""
        entry = self._unsettled.get(call_id)
        if entry is None or call_id in self._sending:
            return
        caller, cost, tokens, day = entry
        keys = self._keys(caller, day, int(self.clock() // 60))
        args = [call_id, self.host, repr(cost), tokens, _DAY_KEY_TTL_S, _MINUTE_KEY_TTL_S]
        self._sending.add(call_id)
        try:
            took = int(await self._run("settle", [keys[0], keys[1], keys[2], keys[4]], args))
        except SharedUnavailable:
            return  # kept: sent again by the watch
        finally:
            self._sending.discard(call_id)
        self._unsettled.pop(call_id, None)
        if not self._unsettled:
            self._flushed.set()
        if not took:  # the reservation was gone (expired, or Redis lost it): the ledger's figure counts instead
            self.stale = True

    @property
    def unsettled(self) -> int:
        """Settles Redis has not taken yet."""
        return len(self._unsettled)

    async def flushed(self, within: float) -> bool:
        """Wait (at most ``within`` seconds) until Redis took every settle; whether it did."""
        try:
            await asyncio.wait_for(self._flushed.wait(), within)
        except TimeoutError:
            return False
        return True

    async def settled(self) -> None:
        """Wait (bounded) for the settles in flight."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=COMMAND_TIMEOUT_S * 2)

    # --- the watch -----------------------------------------------------------------------------

    async def _watching(self) -> None:
        """Every :data:`WATCH_S`: send kept settles again, check Redis's marker, renew this process's leases."""
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                await self.tick()
            except SharedUnavailable:
                pass  # said once by _run; tried again next time
            except Exception:  # a bug must not end the watch
                log.error("turnout gateway: the Redis spend watch failed", exc_info=True)

    async def tick(self) -> None:
        """One round of the watch (see :meth:`_watching`).

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        for call_id in list(self._unsettled):
            await self._send(call_id)
            if call_id in self._unsettled:
                raise SharedUnavailable("a settle was not taken")
        now = self.clock()
        if self._known is not None:
            marker = await self._marker()
            if marker != self._known or self.stale:
                async with self._seeding:
                    await self.reseed(now - now % 86400)
        if now - self._renewed >= RENEW_S:
            await self.renew()
        for caller in list(self.held_now):  # what /status and the status page show, kept fresh once asked
            await self.held(caller, now - now % 86400)

    async def _marker(self) -> str | None:
        from redis.exceptions import RedisError

        self._client()
        try:
            value = await self._redis.hget(self._epoch_key, "id")
        except (RedisError, OSError) as exc:
            raise SharedUnavailable(type(exc).__name__) from exc
        return value.decode() if isinstance(value, bytes) else None

    async def renew(self) -> None:
        """Extend the lease of every reservation of this process's calls in flight.

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        now = self.clock()
        self._renewed = now
        for (caller, day), ids in list(self._held.items()):
            keys = self._keys(caller, day, 0)
            await self._run("renew", [keys[1], keys[2]], [repr(now + RESERVATION_TTL_S), *ids])

    async def aclose(self) -> None:
        """Wait (bounded) for the settles in flight, send the kept ones once more, then close the connection."""
        await self.settled()
        if self._unsettled:
            with contextlib.suppress(SharedUnavailable):
                for call_id in list(self._unsettled):
                    await self._send(call_id)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._unsettled:
            log.error("turnout gateway: %d settles could not be sent to Redis before closing", len(self._unsettled))
        if self._redis is not None:
            from redis.exceptions import RedisError

            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self._redis.aclose(), COMMAND_TIMEOUT_S)
            self._redis = None
