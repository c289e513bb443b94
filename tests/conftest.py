"""Shared test fixtures: recorded payloads, a real redis-server, and the helper modules' import path."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

# Test helpers (tests/fakes.py, tests/servers.py) are importable from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import RedisServer, free_port, redis_executable

# Property tests assert behaviour, not speed: no per-example deadline, which a shared two-core machine would miss.
settings.register_profile("turnout", deadline=None)
settings.load_profile("turnout")

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


#: AWS variables a developer's shell may hold: a test sees none of them (its own come from monkeypatch).
_AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)


@pytest.fixture(scope="session", autouse=True)
def _aws_isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test reaches an instance metadata address (169.254.169.254) or reads the developer's AWS files or keys.

    botocore's chain is pointed at empty config and credentials files, its metadata lookup is switched off, and
    every AWS credential variable is cleared for the whole session.
    """
    home = tmp_path_factory.mktemp("aws")
    (home / "config").write_text("")
    (home / "credentials").write_text("")
    saved = {name: os.environ.get(name) for name in (*_AWS_VARIABLES, "AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE")}
    saved["AWS_SHARED_CREDENTIALS_FILE"] = os.environ.get("AWS_SHARED_CREDENTIALS_FILE")
    for name in _AWS_VARIABLES:
        os.environ.pop(name, None)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ["AWS_CONFIG_FILE"] = str(home / "config")
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(home / "credentials")
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
