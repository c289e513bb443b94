"""Shared test fixtures: recorded payloads, a real redis-server, and the helper modules' import path."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Test helpers (tests/fakes.py, tests/servers.py) are importable from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import RedisServer, free_port, redis_executable

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# No test may reach a cloud metadata server (169.254.169.254, metadata.google.internal), and none may use the
# developer's own Google credentials. google-auth reads these when it is imported, so they are set before any
# test module loads. It skips its metadata probe only for NO_GCE_CHECK == "true" (lowercase: "True" would still
# probe), and any probe it still makes goes to a loopback port nothing listens on.
_UNUSED = f"127.0.0.1:{free_port()}"
os.environ.update(
    NO_GCE_CHECK="true",
    GCE_METADATA_HOST=_UNUSED,
    GCE_METADATA_IP=_UNUSED,
    CLOUDSDK_CONFIG=tempfile.mkdtemp(prefix="turnout-no-gcloud-"),
)
os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    """The recorded provider payloads kept in the repository (tests/fixtures, sources in SOURCES.md)."""
    assert FIXTURES.is_dir(), f"recorded fixtures not found at {FIXTURES}"
    return FIXTURES


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the whole session (stopped afterwards)."""
    exe = redis_executable()
    if exe is None:
        pytest.fail("redis-server is not installed: run `make test` as root, or `sudo apt-get install redis-server`")
    server = RedisServer(exe, free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of a running, empty Redis."""
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flush()
    return redis_server.url


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A tracer provider that keeps every finished span in memory, and the exporter that holds them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()
