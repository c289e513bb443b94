"""Cooldowns, rejected keys and open circuit breakers shared between processes through Redis.

Reads never touch the network: the walk reads a local mirror. Writes update the mirror at once, then
Redis (a cooldown is a key whose TTL is the cooldown; a rejected key's record is a key whose TTL is the time
the record means something, see :mod:`turnout.state.dead_keys`) and announce themselves on a
pub/sub channel; every process applies announcements to its mirror as they arrive and resynchronises the
whole mirror on (re)connection and every few seconds.

:meth:`RedisStore.start` (awaited by ``async with Client(...)`` and the gateway's start-up) waits for the first
synchronisation, at most the connect timeout, so a new process sees the shared state on its first call.
:meth:`RedisStore.aclose` stops the background task by a closing flag as well as by cancellation, and bounds
every wait, so closing never hangs, whether Redis is up, down or not answering.

If Redis becomes unreachable, nothing fails: the walk keeps using the local mirror, a warning is logged
once per outage and :attr:`RedisStore.errors` counts failed operations. When Redis returns, the mirror's
active cooldowns and key records are written back and sharing resumes.

A rejection is recorded in a transaction (``WATCH``/``MULTI``) that applies the one policy of
:func:`~turnout.state.dead_keys.rejected` to the shared record, so two processes that each see one rejection
of a key confirm it between them. A probe is taken in the local mirror at once (the pick is synchronous) and
announced right after, so other processes skip the key while it is probed.

An open breaker is a key (``br:<entry>``: opened at, until, interval) that outlives its open interval, so every
process sees it half-open until a probe closes or reopens it; the probe is a second key taken with ``SET NX`` and
a lease, so N processes send one probe between them.

A conversation's pin (:mod:`turnout.walk.affinity`) is a key (``aff:<conversation>``: key position, member) whose TTL
is the pin's life, announced when it is new, moves, or is past half its life; every process keeps the pins it
hears in a bounded mirror (:class:`~turnout.state.pins.PinTable`). Pins are not resynchronised in bulk: a process
that missed one follows the next announcement of that conversation.

Key rotation positions stay per process (they would otherwise cost a round trip per attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from turnout.state.base import BreakerRecord, StateStore
from turnout.state.dead_keys import KeyHealth, decode, rejected, stronger, supersedes
from turnout.state.pins import Pin, PinTable
from turnout.state.shelf import Shelf

log = logging.getLogger("turnout.state")

#: Seconds to connect to Redis; also the longest :meth:`RedisStore.start` waits for the first synchronisation.
CONNECT_TIMEOUT_S = 1.0
#: Seconds one Redis command may take before the connection counts as lost.
COMMAND_TIMEOUT_S = 1.0
#: The longest each step of :meth:`RedisStore.aclose` waits.
CLOSE_STEP_S = 0.5

#: How long an open breaker's record outlives its open interval (it stays half-open until a probe reports).
BREAKER_RECORD_TTL_S = 3600.0

# Keep the later of two deadlines (a value is "until" or "until@since"); set the TTL to the remaining time. An
# extended cooldown keeps the start it had.
_SET_LATER = """
local cur = redis.call('GET', KEYS[1])
local value = ARGV[1]
if cur then
  local at = string.find(cur, '@', 1, true)
  local cur_until = tonumber(at and string.sub(cur, 1, at - 1) or cur)
  if cur_until >= tonumber(ARGV[3]) then return 0 end
  if at and cur_until > tonumber(ARGV[4]) then value = ARGV[3] .. string.sub(cur, at) end
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return 1
"""


class RedisStore(StateStore):
    """A :class:`StateStore` shared through Redis, with a local mirror for reads.

    Args:
        url: ``redis://host:port/db``.
        prefix: Prefix of every key and of the pub/sub channel.
        clock: Wall clock (seconds).
        resync_interval: Seconds between full resynchronisations (a safety net for missed messages).
        connect_timeout: Seconds to connect, and the bound of :meth:`start`.
        command_timeout: Seconds one command may take before the connection counts as lost.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "turnout:",
        clock: Callable[[], float] = time.time,
        resync_interval: float = 5.0,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        command_timeout: float = COMMAND_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.clock = clock
        self.resync_interval = resync_interval
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.channel = f"{prefix}events"
        self._cooldowns: dict[str, float] = {}
        self._since: dict[str, float] = {}
        self._keys: dict[str, KeyHealth] = {}
        self._breakers: dict[str, BreakerRecord] = {}
        self._probes: dict[str, float] = {}  # probes taken while Redis is unreachable
        self._pins = PinTable()
        self._shelf = Shelf(clock)  # kept values, for while Redis is unreachable
        self._announcing: set[asyncio.Task[None]] = set()
        self._redis: Any = None
        self._task: asyncio.Task[None] | None = None
        self._script: Any = None
        self.connected = False
        self.errors = 0
        self._warned = False
        self._closing = False
        self._synced = asyncio.Event() if _has_loop() else None
        self._changed: asyncio.Condition | None = None

    # --- the StateStore interface ----------------------------------------------------------------

    def cooldown_until(self, key: str, now: float) -> float | None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        until = self._cooldowns.get(key)
        if until is None:
            return None
        if until <= now:
            self._cooldowns.pop(key, None)
            self._since.pop(key, None)
            return None
        return until

    async def set_cooldown(self, key: str, until: float, *, since: float | None = None) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        now = self.clock()
        current = self._cooldowns.get(key)
        if current is None or until > current:
            self._cooldowns[key] = until
            if current is None or current <= now:
                if since is None:
                    self._since.pop(key, None)
                else:
                    self._since[key] = since
        ttl_ms = max(int((until - now) * 1000), 1)
        await self._guard(self._write_cooldown(key, until, self._since.get(key), ttl_ms))

    def cooldown_since(self, key: str) -> float | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._since.get(key) if key in self._cooldowns else None

    async def clear_cooldown(self, key: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        self._cooldowns.pop(key, None)
        self._since.pop(key, None)
        await self._guard(self._write_clear(key))

    def cooldowns(self, now: float) -> dict[str, float]:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        for key in [k for k, v in self._cooldowns.items() if v <= now]:
            del self._cooldowns[key]
            self._since.pop(key, None)
        return dict(self._cooldowns)

    def key_health(self, key_id: str) -> KeyHealth | None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        return self._keys.get(key_id)

    async def report_auth_failure(self, key_id: str, *, witness: str, now: float) -> KeyHealth:
        """See :class:`~turnout.state.base.StateStore` (applied to the shared record when Redis is reachable)."""
        self._ensure_started()

        def change(current: KeyHealth | None) -> KeyHealth:
            return rejected(current, key_id, witness, now)

        health = self._keys[key_id] = change(self._keys.get(key_id))
        if self.connected and not self._closing:
            try:
                health = self._keys[key_id] = await self._update_key(key_id, change)
            except (RedisError, OSError) as exc:
                self._lost(exc)
        return health

    def claim_probe(self, key_id: str, now: float) -> bool:
        """See :class:`~turnout.state.base.StateStore` (taken locally, then announced to the other processes)."""
        health = self._keys.get(key_id)
        if health is None or health.state(now) != "probe_due":
            return False
        probing = self._keys[key_id] = health.probing(now)
        if self.connected and not self._closing and _has_loop():

            def change(current: KeyHealth | None) -> KeyHealth:
                if current is not None and current.state(now) != "probe_due":
                    return current  # another process took the probe (or the key changed) first
                return probing

            task = asyncio.get_running_loop().create_task(self._guard(self._update_key(key_id, change)))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)
        return True

    def key_records(self) -> list[KeyHealth]:
        """See :class:`~turnout.state.base.StateStore`."""
        return list(self._keys.values())

    def breaker(self, key: str) -> BreakerRecord | None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        return self._breakers.get(key)

    async def open_breaker(self, key: str, record: BreakerRecord) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        self._breakers[key] = record
        self._probes.pop(key, None)
        await self._guard(self._write_breaker(key, record))

    async def close_breaker(self, key: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._ensure_started()
        self._breakers.pop(key, None)
        self._probes.pop(key, None)
        await self._guard(self._write_breaker(key, None))

    async def claim_breaker_probe(self, key: str, now: float, hold: float) -> bool:
        """See :class:`~turnout.state.base.StateStore` (one ``SET NX`` with a lease; locally while unreachable)."""
        self._ensure_started()
        if self.connected and not self._closing:
            try:
                taken = await self._client().set(
                    f"{self.prefix}brp:{key}", repr(now), nx=True, px=max(int(hold * 1000), 1)
                )
            except (RedisError, OSError) as exc:
                self._lost(exc)
            else:
                return bool(taken)
        if self._probes.get(key, 0.0) > now:
            return False
        self._probes[key] = now + hold
        return True

    def breakers(self) -> dict[str, BreakerRecord]:
        """See :class:`~turnout.state.base.StateStore`."""
        return dict(self._breakers)

    def pinned(self, key: str, now: float, renew: float | None = None) -> Pin | None:
        """See :class:`~turnout.state.base.StateStore` (the mirror; a renewal is shared as :meth:`pin` shares it)."""
        self._ensure_started()
        if renew is None:
            return self._pins.get(key, now)
        left = self._pins.until(key)
        pin = self._pins.get(key, now, now + renew)
        if pin is not None and left is not None:
            self._share_pin(key, pin, now, renew, left - now > renew / 2)
        return pin

    def pin(self, key: str, pin: Pin, *, now: float, ttl: float) -> None:
        """See :class:`~turnout.state.base.StateStore` (kept at once, shared in the background)."""
        self._ensure_started()
        left = self._pins.until(key)
        old = self._pins.put(key, pin, now + ttl, now)
        self._share_pin(key, pin, now, ttl, old == pin and left is not None and left - now > ttl / 2)

    def _share_pin(self, key: str, pin: Pin, now: float, ttl: float, fresh: bool) -> None:
        """Announce ``key``'s pin for ``ttl`` seconds from ``now`` unless the shared one is ``fresh``.

        ``fresh``: the shared pin is the same and has half its life or more left.
        """
        if fresh or not self.connected or self._closing or not _has_loop():
            return  # nothing new to share, or nothing to share with
        task = asyncio.get_running_loop().create_task(self._guard(self._write_pin(key, pin, now + ttl, ttl)))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    def pin_counts(self, now: float) -> dict[str, int]:
        """See :class:`~turnout.state.base.StateStore` (the mirror)."""
        return self._pins.counts(now)

    def limit_pins(self, limit: int) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._pins.limit = limit

    async def keep(self, key: str, value: bytes, ttl: float) -> None:
        """See :class:`~turnout.state.base.StateStore`: in Redis, and in this process for when it is unreachable."""
        self._ensure_started()
        self._shelf.put(key, value, ttl)
        await self._guard(self._client().set(f"{self.prefix}kept:{key}", value, px=max(int(ttl * 1000), 1)))

    async def kept(self, key: str) -> bytes | None:
        """See :class:`~turnout.state.base.StateStore`: Redis's value, else (unreachable) this process's copy."""
        self._ensure_started()
        if self.connected and not self._closing:
            try:
                value = await self._client().get(f"{self.prefix}kept:{key}")
            except (RedisError, OSError) as exc:
                self._lost(exc)
            else:
                if value is not None:
                    return bytes(value)
        return self._shelf.get(key)  # also what was kept here while Redis was unreachable

    async def aclose(self) -> None:
        """Stop the background task and close the connections, each step bounded by :data:`CLOSE_STEP_S`.

        The task stops on the closing flag even when its cancellation is lost (on Python 3.11 a cancellation
        that races the pub/sub read's own timeout can surface as a timeout, or be swallowed by it).
        """
        self._closing = True
        for announcing in list(self._announcing):
            announcing.cancel()
        if self._announcing:
            await asyncio.wait(self._announcing, timeout=CLOSE_STEP_S)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_STEP_S)
            if not task.done():
                log.warning("redis state task still busy after %.1fs; it stops on its own", CLOSE_STEP_S)
            elif not task.cancelled():
                task.exception()  # retrieved: the loop ends quietly on the closing flag
        redis, self._redis = self._redis, None
        if redis is not None:
            await _bounded(redis.aclose())
        self.connected = False

    # --- connection management -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect and load the shared state, waiting at most :attr:`connect_timeout` seconds.

        Without it the first use starts the connection in the background and reads an empty mirror. When Redis
        does not answer in time, the store goes on with the local view (and keeps trying in the background).
        """
        self._ensure_started()
        if self._synced is None or self._synced.is_set():
            return
        try:
            await asyncio.wait_for(self._synced.wait(), timeout=self.connect_timeout)
        except TimeoutError:
            if not self._warned:
                log.warning(
                    "redis state backend did not answer within %.1fs; using the local view", self.connect_timeout
                )
                self._warned = True

    async def sync(self) -> None:
        """Reload the shared state from Redis now (no-op while Redis is unreachable)."""
        self._ensure_started()
        await self._guard(self._resync())

    async def wait_until(self, predicate: Callable[[], bool], within: float) -> bool:
        """Wait until ``predicate()`` holds after a change from Redis arrived (at most ``within`` seconds)."""
        self._ensure_started()
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(predicate), within)
        return predicate()

    @property
    def closing(self) -> bool:
        """:meth:`aclose` has begun: the background task stops at its next step."""
        return self._closing

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def _ensure_started(self) -> None:
        if self._task is None and not self._closing and _has_loop():
            if self._synced is None:
                self._synced = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="turnout-redis-state")

    def _client(self) -> Any:
        if self._redis is None:
            self._redis = aioredis.from_url(
                self.url,
                socket_connect_timeout=self.connect_timeout,
                socket_timeout=self.command_timeout,
                health_check_interval=5,
            )
            self._script = self._redis.register_script(_SET_LATER)
        return self._redis

    def _cd_key(self, key: str) -> str:
        return f"{self.prefix}cd:{key}"

    async def _guard(self, op: Any) -> None:
        if not self.connected or self._closing:
            op.close()
            return
        try:
            await op
        except (RedisError, OSError) as exc:
            self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        self.errors += 1
        if self.connected or not self._warned:
            log.warning("redis state backend unreachable (%s); using the local view", type(exc).__name__)
            self._warned = True
        self.connected = False

    async def _write_cooldown(self, key: str, until: float, since: float | None, ttl_ms: int) -> None:
        value = repr(until) if since is None else f"{until!r}@{since!r}"
        await self._script(keys=[self._cd_key(key)], args=[value, ttl_ms, repr(until), repr(self.clock())])
        await self._client().publish(self.channel, f"cd {value} {key}")

    async def _write_breaker(self, key: str, record: BreakerRecord | None) -> None:
        """Share an open breaker (or its closing); either way its probe is over."""
        client = self._client()
        async with client.pipeline(transaction=True) as pipe:
            pipe.delete(f"{self.prefix}brp:{key}")
            if record is None:
                pipe.delete(f"{self.prefix}br:{key}")
                pipe.publish(self.channel, f"brc 0 {key}")
            else:
                ttl = max(record.until - self.clock(), 0.0) + BREAKER_RECORD_TTL_S
                pipe.set(f"{self.prefix}br:{key}", record.encode(), px=int(ttl * 1000))
                pipe.publish(self.channel, f"br {record.encode().replace(' ', ',')} {key}")
            await pipe.execute()

    async def _write_pin(self, key: str, pin: Pin, until: float, ttl: float) -> None:
        value = f"{pin.key},{pin.member}@{until!r}"
        async with self._client().pipeline(transaction=False) as pipe:
            pipe.set(f"{self.prefix}aff:{key}", pin.encode(), px=max(int(ttl * 1000), 1))
            pipe.publish(self.channel, f"aff {value} {key}")
            await pipe.execute()

    async def _write_clear(self, key: str) -> None:
        await self._client().delete(self._cd_key(key))
        await self._client().publish(self.channel, f"clear 0 {key}")

    def _key_key(self, key_id: str) -> str:
        return f"{self.prefix}key:{key_id}"

    async def _update_key(self, key_id: str, change: Callable[[KeyHealth | None], KeyHealth]) -> KeyHealth:
        """Apply ``change`` to the shared record of ``key_id`` atomically; announce and return the result."""
        name = self._key_key(key_id)
        async with self._client().pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(name)
                    current = decode(await pipe.get(name))
                    health = change(current)
                    if health == current:
                        await pipe.unwatch()
                        return health
                    encoded = health.encode()
                    pipe.multi()
                    pipe.set(name, encoded, px=max(int((health.expires() - self.clock()) * 1000), 1))
                    pipe.publish(self.channel, b"key " + key_id.encode() + b" " + encoded)
                    await pipe.execute()
                    return health
                except WatchError:
                    continue  # another process changed the record meanwhile: apply the change to its version

    async def _run(self) -> None:
        delay = 0.05
        while not self._closing:
            pubsub = None
            try:
                client = self._client()
                pubsub = client.pubsub()
                await pubsub.subscribe(self.channel)
                was_down = self._warned
                self.connected = True
                await self._push_local()  # what this process learned while not connected
                await self._resync()
                if was_down:
                    log.warning("redis state backend reachable again; sharing resumed")
                    self._warned = False
                if self._synced is not None:
                    self._synced.set()
                delay = 0.05
                await self._listen(pubsub)
            except (RedisError, OSError) as exc:
                if self.closing:  # a cancellation that surfaced as a timeout: closing, not a lost connection
                    break
                self._lost(exc)
                await self._notify()
                if self._synced is not None:
                    self._synced.set()
            finally:
                if pubsub is not None:
                    await _bounded(pubsub.aclose())
            if not self._closing:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _listen(self, pubsub: Any) -> None:
        """Apply announcements until closing (a lost connection raises)."""
        next_sync = time.monotonic() + self.resync_interval
        while not self._closing:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is not None:
                self._apply(message.get("data"))
                await self._notify()
            if time.monotonic() >= next_sync:
                await self._resync()
                next_sync = time.monotonic() + self.resync_interval

    def _apply(self, data: Any) -> None:
        if isinstance(data, bytes):
            data = data.decode()
        if not isinstance(data, str):
            return
        kind, _, rest = data.partition(" ")
        value, _, key = rest.partition(" ")
        if kind == "cd":
            until, since = _cooldown_value(value)
            if until > self._cooldowns.get(key, 0.0):
                self._cooldowns[key] = until
                if since is not None:
                    self._since[key] = since
        elif kind == "clear":
            self._cooldowns.pop(key, None)
            self._since.pop(key, None)
        elif kind == "br":
            record = BreakerRecord.decode(value.replace(",", " "))
            if record is not None:
                self._breakers[key] = record
        elif kind == "brc":
            self._breakers.pop(key, None)
        elif kind == "aff":
            self._apply_pin(value, key)
        elif kind == "key":
            health = decode(key)
            known = self._keys.get(value)
            # an older record arriving late (this process wrote a newer one to its mirror already) is ignored
            if health is not None and health.key_id == value and supersedes(health, known, self.clock()):
                self._keys[value] = health

    def _apply_pin(self, value: str, key: str) -> None:
        """An announced pin, ``<key position>,<member>@<until>``; a malformed one is ignored."""
        head, _, until = value.rpartition("@")
        pin = Pin.decode(head.replace(",", " ", 1))
        try:
            deadline = float(until)
        except ValueError:
            return
        now = self.clock()
        if pin is not None and len(key) <= 128 and deadline > now:
            self._pins.put(key, pin, deadline, now)

    async def _resync(self) -> None:
        client = self._client()
        keys = [k async for k in client.scan_iter(match=f"{self.prefix}cd:*", count=500)]
        values = await client.mget(keys) if keys else []
        now = self.clock()
        fresh: dict[str, float] = {}
        since: dict[str, float] = {}
        strip = len(self.prefix) + 3
        for k, v in zip(keys, values, strict=True):
            if v is None:
                continue
            name = (k.decode() if isinstance(k, bytes) else k)[strip:]
            until, began = _cooldown_value(v.decode() if isinstance(v, bytes) else v)
            if until > now:
                fresh[name] = until
                if began is not None:
                    since[name] = began
        for name, until in self._cooldowns.items():  # a deadline set while this resync ran
            if until > now and until > fresh.get(name, 0.0):
                fresh[name] = until
                if name in self._since:
                    since[name] = self._since[name]
        self._cooldowns, self._since = fresh, since
        names = [k async for k in client.scan_iter(match=f"{self.prefix}br:*", count=500)]
        encoded = await client.mget(names) if names else []
        strip = len(self.prefix) + 3
        self._breakers = {
            (k.decode() if isinstance(k, bytes) else k)[strip:]: record
            for k, v in zip(names, encoded, strict=True)
            if (record := BreakerRecord.decode(v)) is not None
        }
        names = [k async for k in client.scan_iter(match=f"{self.prefix}key:*", count=500)]
        records = await client.mget(names) if names else []
        shared = {h.key_id: h for h in map(decode, records) if h is not None and h.state(now) != "healthy"}
        for key_id, health in self._keys.items():  # a record made while this resync ran
            if key_id not in shared and health.state(now) != "healthy":
                shared[key_id] = health
        self._keys = shared
        await self._notify()

    async def _push_local(self) -> None:
        now = self.clock()
        for key, until in list(self._cooldowns.items()):
            if until > now:
                await self._write_cooldown(key, until, self._since.get(key), max(int((until - now) * 1000), 1))
        for key, record in list(self._breakers.items()):
            await self._write_breaker(key, record)
        for key_id, local in list(self._keys.items()):
            if local.state(now) != "healthy":
                await self._update_key(key_id, functools.partial(stronger, local=local))


def _cooldown_value(value: str) -> tuple[float, float | None]:
    """``(until, since)`` of a shared cooldown's value, ``"until"`` or ``"until@since"``."""
    until, _, since = value.partition("@")
    return float(until), float(since) if since else None


async def _bounded(closing: Any) -> None:
    """Await a close of a connection for at most :data:`CLOSE_STEP_S`; its failure changes nothing."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(closing, CLOSE_STEP_S)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
