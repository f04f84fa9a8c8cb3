"""Where spans go, as the standard ``OTEL_*`` environment variables say, and the tracer provider that
sends them there: the gateway and the engine server read the same variables and configure alike.

``OTEL_TRACES_EXPORTER`` = ``otlp`` | ``console`` | ``none`` (the default: tracing off),
``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` = ``http/protobuf`` (default) | ``grpc`` (when its exporter
package is installed), ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` / ``_HEADERS`` / ``_TIMEOUT`` (read by the
exporter itself), ``OTEL_SDK_DISABLED``; ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` for the
resource and ``OTEL_BSP_*`` for the batch processor (read by the SDK). For tests only,
``SORTYARD_TEST_SPAN_FILE=/path`` writes every finished span as one JSON line to that file, at once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

__all__ = ["JsonLinesSpanExporter", "exporter_from_env", "span_record", "tracer_provider"]

logger = logging.getLogger("sortyard.tracing")


class JsonLinesSpanExporter(SpanExporter):
    """Writes each finished span as one JSON line to a file (tests read spans of other processes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_record(span), default=str) + "\n" for span in spans]
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.writelines(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A span as plain data: names, ids in W3C hex, times in ns, attributes."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "service": (span.resource.attributes.get("service.name") if span.resource else None),
    }


def exporter_from_env(environ: Mapping[str, str] | None = None) -> tuple[SpanExporter | None, bool]:
    """The span exporter the ``OTEL_*`` variables ask for (None: tracing off) and whether to export
    each span at once (the test file exporter) rather than in batches."""
    env = os.environ if environ is None else environ
    test_file = env.get("SORTYARD_TEST_SPAN_FILE")
    if test_file:
        return JsonLinesSpanExporter(test_file), True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None, False
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    for name in names:
        if name == "none":
            return None, False
        if name == "console":
            return ConsoleSpanExporter(), False
        if name == "otlp":
            return _otlp_exporter(env), False
        logger.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console, none); ignored", name)
    return None, False


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            logger.error(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package opentelemetry-exporter-otlp-proto-grpc, "
                "which is not installed: tracing is OFF. Install it or use http/protobuf."
            )
            return None
        return GrpcExporter()  # type: ignore[no-any-return,unused-ignore]
    if protocol not in ("http/protobuf", "http/json"):
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; using http/protobuf", protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def tracer_provider(
    exporter: SpanExporter,
    *,
    service_name: str,
    sampler: Sampler,
    id_generator: IdGenerator,
    export_each: bool = False,
) -> TracerProvider:
    """The provider that sends every span to ``exporter``: resource ``service.name`` from
    ``OTEL_SERVICE_NAME`` else ``service_name`` (``OTEL_RESOURCE_ATTRIBUTES`` merged by the SDK); a
    batch processor, or with ``export_each`` (the test file exporter) one that exports each span as it
    ends."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(sampler=sampler, resource=resource, id_generator=id_generator)
    processor = SimpleSpanProcessor(exporter) if export_each else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider
