"""OpenTelemetry traces of the gateway: a SERVER span per request, a child per stage, a CLIENT span
per upstream attempt, W3C ``traceparent`` passed on to the replica.

Where spans go is set by the standard ``OTEL_*`` environment variables, read once per process, as the
engine server reads them (``sortyard.telemetry.exporter``: ``OTEL_TRACES_EXPORTER`` = ``otlp`` |
``console`` | ``none``, the default: tracing off).

How many requests are traced is the policy's ``telemetry.sampling_ratio``, applied as
``ParentBased(TraceIdRatioBased(ratio))``: a caller's sampled ``traceparent`` is followed, an unsampled
one is passed through untouched (``sortyard.telemetry.server_span``: the decision is made before any
SDK object exists, so a request that is not traced costs a random number and a compare, nothing more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, SamplingResult, TraceIdRatioBased

from gateway.policy.telemetry import TelemetryConfig
from gateway.telemetry.spans import RequestSpan
from sortyard.telemetry import semconv as sc
from sortyard.telemetry.exporter import exporter_from_env, tracer_provider
from sortyard.telemetry.server_span import PresetTraceIds, start_server_span


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
        self._ids = PresetTraceIds()
        self.provider: TracerProvider | None = None
        if exporter is None:
            return
        self.provider = tracer_provider(
            exporter,
            service_name=service_name,
            sampler=ParentBased(self._root),
            id_generator=self._ids,
            export_each=export_each,
        )
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
        if ratio != self._root.ratio:
            self._root.set_ratio(ratio)
        return start_server_span(
            self.tracer, self._ids, self._root.bound, headers, name, attributes, start_time_ns
        )

    def force_flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


DEFAULT_RATIO = TelemetryConfig().sampling_ratio


__all__ = ["GatewayTracer", "PolicyRatioSampler"]
