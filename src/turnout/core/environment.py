"""Time and randomness as the walk sees them: one :class:`Environment` handed from the client down to every walk.

The client passes it to the factory, the factory to each route's reliable provider, and the provider keeps it in the
route's :class:`~turnout.walk.context.WalkContext`. The real one (:data:`REAL`) reads the system clock, sleeps on the
event loop and draws from :mod:`random`; tests inject fakes (a clock that moves only when something sleeps, a fixed
jitter) in one argument instead of three.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Environment:
    """The clock, the sleep and the jitter of every walk (tests inject fakes; the defaults are the real ones).

    Attributes:
        clock: The wall clock in Unix seconds (cooldown deadlines, breaker and pin times, attempt start times). The
            factory also hands it to the key pools and the conversation pins.
        sleep: Waits the given seconds (a retry's backoff); a fake one advances a fake clock and returns at once.
        jitter: A uniform random number in [0, 1) (each backoff keeps at least half its length).
    """

    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[], float] = random.random


#: The real environment: the system clock, the event loop's sleep, :func:`random.random`.
REAL = Environment()
