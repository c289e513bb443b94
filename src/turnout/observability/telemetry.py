"""Where trace spans go: ``[telemetry]`` and the standard ``OTEL_*`` variables (the ``otel`` extra).

The client imports this module only when tracing is on, so without it nothing of OpenTelemetry is loaded.
Spans go, first match wins:

1. to the tracer provider handed to the client (``Client(..., tracer_provider=...)``);
2. to the application's global tracer provider, when it has set one (its own SDK set-up, or
   ``opentelemetry-instrument``);
3. to Turnout's own SDK provider, made on the first span: a batch processor per exporter that
   ``[telemetry] exporter`` or ``OTEL_TRACES_EXPORTER`` names (``otlp``: OTLP over HTTP/protobuf; ``console``;
   ``none``), the resource of ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (``service.name`` defaults
   to ``turnout``), the sampler of ``OTEL_TRACES_SAMPLER``. The OTLP exporter reads its own variables
   (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``..._HEADERS``, ``..._TIMEOUT``, ...); a ``[telemetry]`` key wins over
   the variable it stands for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from turnout.config.schema import Telemetry
from turnout.core.errors import ConfigError
from turnout.observability.tracing import Tracing

#: Exporters Turnout sets up itself (``OTEL_TRACES_EXPORTER`` values).
EXPORTERS = ("otlp", "console", "none")
#: The one OTLP protocol the ``otel`` extra ships an exporter for.
OTLP_PROTOCOL = "http/protobuf"
#: Values of ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` that turn content capture on.
_CAPTURE_ON = frozenset(("true", "1", "yes", "span_only", "span_and_event"))


def build_tracing(
    telemetry: Telemetry, provider: trace.TracerProvider | None = None, env: Mapping[str, str] | None = None
) -> Tracing | None:
    """The client's :class:`~turnout.observability.tracing.Tracing` for ``[telemetry]`` (None: nothing to export).

    ``OTEL_SDK_DISABLED=true`` turns Turnout's own pipeline off, as it does the SDK's.

    Args:
        telemetry: The ``[telemetry]`` section.
        provider: A tracer provider to use (a test's, or the application's own); Turnout never shuts it down.
        env: The environment (default: ``os.environ``).

    Raises:
        ConfigError: The exporter or the OTLP protocol is one Turnout cannot set up.
    """
    env = os.environ if env is None else env
    capture = telemetry.capture_content or (
        env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() in _CAPTURE_ON
    )
    limit = telemetry.max_content_chars
    if provider is not None:
        given = provider
        return Tracing(lambda: (given, None), capture_content=capture, max_content_chars=limit)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = _exporter_names(telemetry, env)
    if not exporters:
        return None
    if "otlp" in exporters:
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol.strip() != OTLP_PROTOCOL:
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol.strip()[:40]!r} is not supported: Turnout's exporter "
                f"speaks {OTLP_PROTOCOL} (port 4318); for another protocol, set up a global tracer provider",
                path="telemetry.exporter",
            )

    def source() -> tuple[trace.TracerProvider, Callable[[], object] | None]:
        current = trace.get_tracer_provider()
        if not isinstance(current, trace.ProxyTracerProvider):  # the application set one up: use it
            return current, None
        own = TracerProvider(resource=_resource(telemetry))
        for name in exporters:
            own.add_span_processor(BatchSpanProcessor(_exporter(name, telemetry)))
        return own, own.shutdown

    return Tracing(source, capture_content=capture, max_content_chars=limit)


def _exporter_names(telemetry: Telemetry, env: Mapping[str, str]) -> list[str]:
    """The exporters to set up, ``none`` left out (``[telemetry] exporter``, else ``OTEL_TRACES_EXPORTER``)."""
    names: list[str]
    if telemetry.exporter is not None:
        names = [telemetry.exporter]
    else:
        names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
        unknown = [n for n in names if n not in EXPORTERS]
        if unknown:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER names {unknown[0][:40]!r}; Turnout sets up {', '.join(EXPORTERS)} "
                "(for another exporter, set up a global tracer provider)",
                path="telemetry.exporter",
            )
    return [n for n in dict.fromkeys(names) if n != "none"]


def _exporter(name: str, telemetry: Telemetry) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    headers = {k: v.reveal() for k, v in telemetry.headers.items()} or None
    return OTLPSpanExporter(endpoint=_traces_url(telemetry.endpoint), headers=headers)


def _traces_url(endpoint: str | None) -> str | None:
    """``[telemetry] endpoint`` as the exporter's URL: a bare collector address gets the traces path."""
    if endpoint is None:
        return None  # the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT itself
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def _resource(telemetry: Telemetry) -> Resource:
    if telemetry.service_name is not None:
        return Resource.create({"service.name": telemetry.service_name})
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "turnout"}))
    return resource
