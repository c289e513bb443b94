"""Fixtures for the gateway tests: a simulator on loopback whose delays and pacing take no time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gateway_support import instant

from turnout.sim import Simulator


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A started simulator with an instant sleep (its log shows what reached the upstream)."""
    async with Simulator(sleep=instant) as simulator:
        yield simulator
