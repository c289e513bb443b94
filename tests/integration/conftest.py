"""Fixtures for the integration tests: a real simulator on loopback, with the real clock.

These tests run the whole path: ``Client`` → reliable walk → real adapters → HTTP → ``turnout.sim``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnout.sim import Simulator


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A fault-injecting simulator on a free loopback port (real clock: timeouts are real)."""
    async with Simulator() as simulator:
        yield simulator
