"""Where spans go: ``[telemetry]``, the standard OTEL_* variables, an OTLP collector, and nothing when off."""

from __future__ import annotations

import ast
import asyncio
import gzip
import io
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fakes import Fleet
from servers import loopback_app
from turnout import Client
from turnout.config import load_config_toml
from turnout.core.errors import ConfigError
from turnout.observability import telemetry
from turnout.observability.telemetry import build_tracing

CONFIG = """
default_provider = "openai.main"
[ledger]
enabled = false
[providers.models.openai.main]
api_key = "sk-main-PLANTED"
model = "gpt-4.1"
"""
TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own OTEL_* settings (if any) do not leak into these tests."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


class Collector:
    """An OTLP/HTTP collector on loopback that keeps what it receives."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], ExportTraceServiceRequest]] = []
        self.url = ""

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.requests.append((dict(request.headers), message))
        return web.Response(body=b"", content_type="application/x-protobuf")

    def span_names(self) -> list[str]:
        return [
            span.name
            for _, message in self.requests
            for resource in message.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    kept = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", kept.traces)
    async with loopback_app(app) as kept.url:
        yield kept


async def test_spans_reach_an_otlp_collector_with_the_configured_headers(collector: Collector) -> None:
    """``[telemetry]`` sends OTLP/HTTP to its endpoint with its headers and service name; aclose flushes."""
    text = CONFIG + (
        f'[telemetry]\nenabled = true\nendpoint = "{collector.url}"\nservice_name = "edge-gateway"\n'
        'headers = { "x-collector-token" = "${COLLECTOR_TOKEN}" }\n'
    )
    config = load_config_toml(text, env={"COLLECTOR_TOKEN": "token-123"})
    c = Client(config, adapter_builder=Fleet(openai__main=["hello"]))
    async with c:
        await c.chat("hi")
    assert collector.span_names() == ["chat gpt-4.1", "turnout.chat"]
    headers, message = collector.requests[0]
    assert headers["x-collector-token"] == "token-123"
    assert headers["Content-Type"] == "application/x-protobuf"
    resource = {a.key: a.value.string_value for a in message.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "edge-gateway"


async def test_the_standard_variables_configure_the_exporter(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only ``enabled`` set, OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME say where and who."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    c = Client.from_toml(CONFIG + "[telemetry]\nenabled = true\n", adapter_builder=Fleet())
    async with c:
        await c.chat("hi")
    _, message = collector.requests[0]
    resource = {a.key: a.value.string_value for a in message.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "from-env"
    assert collector.span_names() == ["chat gpt-4.1", "turnout.chat"]


async def test_the_console_exporter_names_the_service_turnout_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """``exporter = "console"`` prints the spans; without a configured or standard name the service is turnout."""
    printed = io.StringIO()
    monkeypatch.setattr(telemetry, "ConsoleSpanExporter", lambda: ConsoleSpanExporter(out=printed))
    c = Client.from_toml(CONFIG + '[telemetry]\nenabled = true\nexporter = "console"\n', adapter_builder=Fleet())
    async with c:
        await c.chat("hi")
    out = printed.getvalue()
    assert '"name": "turnout.chat"' in out and '"name": "chat gpt-4.1"' in out
    assert '"service.name": "turnout"' in out


def test_the_application_global_provider_is_used_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """An application that set up its own tracer provider gets Turnout's spans there (and keeps ownership)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    tracing = build_tracing(load_config_toml(CONFIG + "[telemetry]\nenabled = true\n").telemetry, env={})
    assert tracing is not None
    tracing.tracer().start_span("probe").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["probe"]
    asyncio.run(tracing.aclose())
    tracing.tracer().start_span("still open").end()  # not shut down: it is the application's
    assert len(exporter.get_finished_spans()) == 2


@pytest.mark.parametrize(
    ("env", "extra"),
    [
        ({"OTEL_TRACES_EXPORTER": "none"}, ""),
        ({"OTEL_SDK_DISABLED": "true"}, ""),
        ({}, 'exporter = "none"\n'),
    ],
)
def test_nothing_is_set_up_when_nothing_would_be_exported(env: dict[str, str], extra: str) -> None:
    """An exporter of ``none`` or the SDK switched off leaves tracing off."""
    telemetry = load_config_toml(CONFIG + "[telemetry]\nenabled = true\n" + extra).telemetry
    assert build_tracing(telemetry, env=env) is None


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "'grpc' is not supported"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "'http/json' is not supported"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "names 'zipkin'"),
    ],
)
def test_an_exporter_turnout_cannot_set_up_is_a_config_error(env: dict[str, str], words: str) -> None:
    """A protocol or exporter without a shipped exporter fails when the client is built, saying why."""
    telemetry = load_config_toml(CONFIG + "[telemetry]\nenabled = true\n").telemetry
    with pytest.raises(ConfigError, match=words) as info:
        build_tracing(telemetry, env=env)
    assert info.value.path == "telemetry.exporter"


def test_tracing_without_the_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[telemetry] enabled`` without the otel extra fails at construction and names the extra."""
    monkeypatch.setitem(sys.modules, "turnout.observability.telemetry", None)  # what a missing opentelemetry looks like
    with pytest.raises(ConfigError, match=r"turnout\[otel\]") as info:
        Client.from_toml(CONFIG + "[telemetry]\nenabled = true\n", adapter_builder=Fleet())
    assert info.value.path == "telemetry.enabled"


def test_a_malformed_endpoint_names_its_key_and_hides_its_value() -> None:
    """An endpoint that is no http(s) URL is a config error at ``telemetry.endpoint``, its value not shown."""
    with pytest.raises(ConfigError) as info:
        load_config_toml(CONFIG + '[telemetry]\nendpoint = "collector:4318?token=s3cret"\n')
    assert info.value.path == "telemetry.endpoint" and "s3cret" not in str(info.value)


_PROBE = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from fakes import Fleet
from servers import loopback_app
from turnout import Client
from turnout.gateway import Gateway

async def main() -> None:
    client = Client.from_toml({config!r}, adapter_builder=Fleet(openai__main=["hello"]))
    Gateway(client)
    async with client:
        reply = await client.chat("hi")
        stream = client.stream("hi")
        async with stream:
            async for _ in stream:
                pass
    assert reply.text == "hello"

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


@pytest.mark.parametrize("enabled", [False, True])
def test_opentelemetry_is_imported_only_when_tracing_is_on(enabled: bool) -> None:
    """Without tracing, calls, streams and the gateway never import opentelemetry (with it, they do)."""
    text = CONFIG + f'[telemetry]\nenabled = {"true" if enabled else "false"}\nexporter = "console"\n'
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(tests=str(TESTS), config=text)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout
    modules = ast.literal_eval(out.strip().splitlines()[-1])  # the probe's last line: the module names
    assert (modules != []) is enabled
    if enabled:
        assert "opentelemetry.sdk.trace" in modules
