"""Fixtures for adapter tests (the helpers live in provider_kit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from provider_kit import RecordingServer

from turnout.providers import HttpClient


@pytest.fixture
async def server() -> AsyncIterator[RecordingServer]:
    """A recording loopback server."""
    s = RecordingServer()
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    """A shared HTTP client, closed after the test."""
    client = HttpClient()
    yield client
    await client.aclose()
