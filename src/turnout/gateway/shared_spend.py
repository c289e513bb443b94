"""Spend limits shared by every worker and every host through Redis (``[state] backend = "redis"``).

Each limited key's day lives in Redis, keyed by the UTC day, and changes only by two atomic scripts:

- **reserve**: drop expired reservations, sum the day's settled spend (one field per host) and the
  reservations in flight; refuse when that reached the limit, or when the key's ``rpm`` requests or ``tpm``
  tokens of the current minute are used up; else hold the call's worst case (a field of a hash, with its
  expiry in a sorted set, so a reservation of a process that died expires) and count the request.
- **settle**: replace the call's reservation by its actual cost in this host's field, and add its tokens to
  the minute's count, in one step: a call is never counted twice, nor not at all.

The ledger stays each host's record. At start-up (and after Redis was unreachable) the host's field is raised
to what its ledger file holds for the day, never lowered: calls recorded while Redis was away are counted,
and nothing is counted twice. A host is its name and its ledger file: the workers of a host share one field.
Redis unreachable: :class:`SharedUnavailable`, and limited keys follow ``[gateway] on_ledger_failure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("turnout.gateway")

#: How long a reservation in Redis holds at most (seconds): a process that died does not hold a limit for ever.
RESERVATION_TTL_S = 3600.0
#: Seconds one Redis command may take.
COMMAND_TIMEOUT_S = 1.0
_DAY_KEY_TTL_S = 2 * 86400
_MINUTE_KEY_TTL_S = 120

_RESERVE = """
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
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
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
_RAISE = """
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""


class SharedUnavailable(Exception):
    """Redis could not answer: the shared limit cannot be checked now."""


class SharedSpend:
    """A key's day (spend, reservations, requests and tokens per minute) in Redis, shared by every host.

    Args:
        url: The Redis URL (``[state] url``).
        prefix: The key prefix (``[state] key_prefix``).
        ledger_path: This host's ledger file (it names the host's field with the host name).
        clock: Wall-clock seconds.
    """

    def __init__(
        self, url: str, *, prefix: str, ledger_path: str | Path, clock: Callable[[], float] = time.time
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.clock = clock
        digest = hashlib.sha256(str(Path(ledger_path).absolute()).encode()).hexdigest()[:12]
        self.host = f"{socket.gethostname()}:{digest}"
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}
        self._settling: set[asyncio.Task[None]] = set()
        self.errors = 0
        self.reachable = True
        #: Settles that failed while Redis was away: the next reservation raises the host's field first.
        self.stale = False

    def _client(self) -> Any:
        if self._redis is None:
            # imported here: redis pulls in OpenTelemetry when it is installed, which a gateway without the Redis
            # backend (or without tracing) must not import
            import redis.asyncio as aioredis

            self._redis = aioredis.from_url(
                self.url, socket_connect_timeout=COMMAND_TIMEOUT_S, socket_timeout=COMMAND_TIMEOUT_S
            )
            for name, text in (("reserve", _RESERVE), ("settle", _SETTLE), ("raise", _RAISE)):
                self._scripts[name] = self._redis.register_script(text)
        return self._redis

    def _keys(self, caller: str, day: float, minute: int) -> list[str]:
        d = int(day // 86400)
        p = self.prefix
        return [
            f"{p}spend:{d}:{caller}",
            f"{p}resv:{d}:{caller}",
            f"{p}resvx:{d}:{caller}",
            f"{p}rpm:{minute}:{caller}",
            f"{p}tpm:{minute}:{caller}",
        ]

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> int:
        from redis.exceptions import RedisError

        self._client()
        try:
            result = await self._scripts[script](keys=keys, args=args)
        except (RedisError, OSError) as exc:
            self.errors += 1
            if self.reachable:
                log.error("turnout gateway: Redis unreachable for spend limits (%s)", type(exc).__name__)
            self.reachable = False
            raise SharedUnavailable(type(exc).__name__) from exc
        if not self.reachable:
            log.warning("turnout gateway: Redis reachable again for spend limits")
        self.reachable = True
        return int(result)

    async def reserve(
        self, caller: str, call_id: str, amount: float, limit: float, day: float, rpm: int | None, tpm: int | None
    ) -> int:
        """Reserve ``amount`` for ``call_id``: 1 reserved, 0 the daily limit is reached, -1 rpm, -2 tpm.

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        now = self.clock()
        keys = self._keys(caller, day, int(now // 60))
        args = [call_id, repr(amount), repr(limit), repr(now), repr(now + RESERVATION_TTL_S), _DAY_KEY_TTL_S]
        args += [rpm or 0, tpm or 0, _MINUTE_KEY_TTL_S]
        return await self._run("reserve", keys, args)

    def settle(self, caller: str, call_id: str, cost: float, tokens: int, day: float) -> None:
        """Replace ``call_id``'s reservation by its cost and count its tokens (in the background, bounded)."""
        task = asyncio.get_running_loop().create_task(self._settle(caller, call_id, cost, tokens, day))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, caller: str, call_id: str, cost: float, tokens: int, day: float) -> None:
        keys = self._keys(caller, day, int(self.clock() // 60))
        keys = [keys[0], keys[1], keys[2], keys[4]]
        try:
            await self._run("settle", keys, [call_id, self.host, repr(cost), tokens, _DAY_KEY_TTL_S, _MINUTE_KEY_TTL_S])
        except SharedUnavailable:  # the reservation expires; the ledger's total is raised in on the next start
            self.stale = True

    async def reconcile(self, totals: dict[str, float], day: float) -> None:
        """Raise this host's field of each key to what its ledger file holds for ``day`` (never lower it).

        Raises:
            SharedUnavailable: Redis did not answer.
        """
        minute = int(self.clock() // 60)
        for caller, cost in totals.items():
            await self._run("raise", self._keys(caller, day, minute)[:1], [self.host, repr(cost), _DAY_KEY_TTL_S])
        self.stale = False

    async def settled(self) -> None:
        """Wait (bounded) for the settles in flight."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=COMMAND_TIMEOUT_S * 2)

    async def aclose(self) -> None:
        """Wait (bounded) for the settles in flight, then close the connection."""
        await self.settled()
        if self._redis is not None:
            from redis.exceptions import RedisError

            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self._redis.aclose(), COMMAND_TIMEOUT_S)
            self._redis = None
