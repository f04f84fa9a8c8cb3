"""OpenTelemetry traces of the gateway: a SERVER span per request, a child per stage, a CLIENT span
per upstream attempt, W3C ``traceparent`` passed on to the replica.

Where spans go is set by the standard environment variables, read once per process
(:func:`exporter_from_env`): ``OTEL_TRACES_EXPORTER`` = ``otlp`` | ``console`` | ``none`` (the default:
tracing off), ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` = ``http/protobuf`` (default) | ``grpc`` (when
its exporter package is installed), ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` / ``_HEADERS`` /
``_TIMEOUT`` (read by the exporter itself), ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_BSP_*``, ``OTEL_SDK_DISABLED``. For tests only, ``SORTYARD_TEST_SPAN_FILE=/path`` writes every
finished span as one JSON line to that file.

How many requests are traced is the policy's ``telemetry.sampling_ratio``, applied as
``ParentBased(TraceIdRatioBased(ratio))``: a caller's sampled ``traceparent`` is followed, an unsampled
one is passed through untouched. The decision is made here before any SDK object exists (a random
trace id tested with TraceIdRatioBased's own rule, then handed to the SDK, whose sampler agrees), so a
request that is not traced costs a random number and a compare, nothing more.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, SamplingResult, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind
from opentelemetry.trace.span import TraceState

from gateway.policy.telemetry import TelemetryConfig
from gateway.telemetry import semconv as sc
from gateway.telemetry.spans import RequestSpan
from gateway.telemetry.traceparent import parse_traceparent, traceparent_of

logger = logging.getLogger("sortyard.tracing")

_LOW_64 = (1 << 64) - 1
_getrandbits = random.getrandbits


# --- exporters --------------------------------------------------------------------------------------
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
        return GrpcExporter()
    if protocol not in ("http/protobuf", "http/json"):
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; using http/protobuf", protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


# --- sampling ---------------------------------------------------------------------------------------
class PolicyRatioSampler(Sampler):
    """``TraceIdRatioBased`` whose ratio follows the serving policy (a reload may change it)."""

    def __init__(self, ratio: float) -> None:
        self.set_ratio(ratio)

    def set_ratio(self, ratio: float) -> None:
        self.ratio = ratio
        self.bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        self._inner = TraceIdRatioBased(ratio)

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return self._inner.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return f"PolicyRatioSampler{{{self.ratio}}}"


class _PresetTraceIds(RandomIdGenerator):
    """Hands the SDK the trace id the fast path already drew (and sampled on)."""

    def __init__(self) -> None:
        self.next_trace_id = 0

    def generate_trace_id(self) -> int:
        trace_id, self.next_trace_id = self.next_trace_id, 0
        return trace_id or super().generate_trace_id()


# --- the tracer -------------------------------------------------------------------------------------
class GatewayTracer:
    """Starts request spans; ``enabled`` is False (and every call a no-op) without an exporter."""

    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        export_each: bool = False,
        service_name: str = "sortyard-gateway",
    ) -> None:
        self.enabled = exporter is not None
        self._root = PolicyRatioSampler(DEFAULT_RATIO)
        self._ids = _PresetTraceIds()
        self.provider: TracerProvider | None = None
        if exporter is None:
            return
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
        self.provider = TracerProvider(
            sampler=ParentBased(self._root), resource=resource, id_generator=self._ids
        )
        processor = SimpleSpanProcessor(exporter) if export_each else BatchSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(sc.TRACER_NAME)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, service_name: str = "sortyard-gateway"
    ) -> GatewayTracer:
        exporter, export_each = exporter_from_env(environ)
        return cls(exporter, export_each=export_each, service_name=service_name)

    def start_request(
        self, headers: Mapping[str, str], method: str, route: str, config: TelemetryConfig
    ) -> RequestSpan | None:
        """The request's SERVER span, or None when tracing is off or the request is not sampled."""
        if not self.enabled:
            return None
        span = self.start_server(
            headers,
            sc.server_span_name(method, route),
            config.sampling_ratio,
            {sc.HTTP_REQUEST_METHOD: method, sc.HTTP_ROUTE: route},
        )
        return RequestSpan(self.tracer, span, config) if span is not None else None

    def start_server(
        self,
        headers: Mapping[str, str],
        name: str,
        ratio: float,
        attributes: Mapping[str, Any],
        start_time_ns: int | None = None,
    ) -> trace.Span | None:
        """A SERVER span continuing the caller's ``traceparent``; None when not sampled (or off)."""
        if not self.enabled:
            return None
        value = headers.get("traceparent")
        parent = parse_traceparent(value) if value else None
        if parent is None:  # a new trace: sample on a trace id drawn here
            if ratio != self._root.ratio:
                self._root.set_ratio(ratio)
            trace_id = _getrandbits(128)
            if (trace_id & _LOW_64) >= self._root.bound or trace_id == 0:
                return None  # the common case
            self._ids.next_trace_id = trace_id
            context: Context | None = None
        elif not parent.trace_flags.sampled:
            return None  # the caller decided: its traceparent passes through untouched
        else:
            state = headers.get("tracestate")
            if state:
                parent = SpanContext(
                    parent.trace_id,
                    parent.span_id,
                    is_remote=True,
                    trace_flags=parent.trace_flags,
                    trace_state=TraceState.from_header([state]),
                )
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        span = self.tracer.start_span(
            name, context=context, kind=SpanKind.SERVER, attributes=attributes, start_time=start_time_ns
        )
        if not span.is_recording():  # the SDK disagreed (cannot happen with our sampler): drop it
            return None
        return span

    def force_flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


DEFAULT_RATIO = TelemetryConfig().sampling_ratio


__all__ = [
    "GatewayTracer",
    "JsonLinesSpanExporter",
    "PolicyRatioSampler",
    "exporter_from_env",
    "parse_traceparent",
    "span_record",
    "traceparent_of",
]
