"""Google access tokens: the real google-auth exchange against the simulator's token endpoint on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from google_creds import service_account_file
from turnout.core.errors import ErrorClass, ProviderError
from turnout.providers.google_auth import REFRESH_MARGIN_S, TokenSource
from turnout.sim import Simulator


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator() as simulator:
        yield simulator


class Clock:
    """Wall-clock seconds plus an offset the test moves (google-auth's expiry is wall-clock time)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def test_a_service_account_token_comes_from_the_token_endpoint_and_is_cached(
    sim: Simulator, tmp_path: Path
) -> None:
    """google-auth signs a JWT and exchanges it at ``token_uri``; later calls reuse the token without I/O.

    The token endpoint runs on this test's own event loop: the exchange finishing at all shows it ran in a
    worker thread, not on the loop.
    """
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, sim.google_token_uri)))
    first = await source.token()
    assert first.startswith("ya29.sim-")
    assert await source.token() == first and source.cached() == first
    assert sim.google.issued == 1 and source.refreshes == 1


async def test_concurrent_calls_share_one_refresh(sim: Simulator, tmp_path: Path) -> None:
    """Many calls asking for a token at once cause one exchange, and all get its token."""
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, sim.google_token_uri)))
    tokens = await asyncio.gather(*(source.token() for _ in range(8)))
    assert len(set(tokens)) == 1 and sim.google.issued == 1


async def test_a_token_is_refreshed_before_it_expires(sim: Simulator, tmp_path: Path) -> None:
    """Within the margin before its expiry the token is refreshed ahead of time, not used until it fails."""
    clock = Clock()
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, sim.google_token_uri)), clock=clock)
    first = await source.token()
    clock.offset = sim.google.lifetime - REFRESH_MARGIN_S - 60  # still a minute before the margin
    assert source.cached() == first
    clock.offset = sim.google.lifetime - REFRESH_MARGIN_S + 1
    assert source.cached() is None
    second = await source.token()
    assert second != first and sim.google.issued == 2


async def test_renew_replaces_only_the_rejected_token(sim: Simulator, tmp_path: Path) -> None:
    """A 401's renewal fetches a new token once; a call renewing an already replaced token reuses the new one."""
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, sim.google_token_uri)))
    first = await source.token()
    second = await source.renew(first)
    assert second != first
    assert await source.renew(first) == second and sim.google.issued == 2


async def test_no_credentials_anywhere_fails_fast_naming_the_profile_and_what_was_looked_for() -> None:
    """Without a key file, GOOGLE_APPLICATION_CREDENTIALS, gcloud's file or a metadata server: a clear error, fast."""
    source = TokenSource("vertex.main")
    started = time.monotonic()
    async with asyncio.timeout(20):
        with pytest.raises(ProviderError) as info:
            await source.token()
    assert time.monotonic() - started < 10
    error = info.value
    assert error.provider == "vertex.main" and error.error_class is ErrorClass.NON_RETRYABLE
    assert error.error_type == "credentials_not_found"
    text = str(error)
    for place in ("vertex.main", "credentials_file", "GOOGLE_APPLICATION_CREDENTIALS", "gcloud", "metadata server"):
        assert place in text


async def test_a_refused_token_exchange_is_a_classified_error(sim: Simulator, tmp_path: Path) -> None:
    """A token endpoint that refuses the exchange gives a typed, non-retryable error, not google-auth's own."""
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, f"{sim.url}/_sim/google/missing")))
    with pytest.raises(ProviderError) as info:
        await source.token()
    assert info.value.error_type == "token_refresh_failed" and info.value.provider == "vertex.main"


def test_importing_turnout_does_not_import_google_auth() -> None:
    """google-auth is imported only when a Vertex profile's adapter is built, never by ``import turnout``."""
    code = (
        "import sys, turnout, turnout.client, turnout.factory, turnout.providers; print('google.auth' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
