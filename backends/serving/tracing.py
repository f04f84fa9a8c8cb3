"""The engine continues the gateway's trace: a SERVER span per request with queue-wait, prefill and
decode children.

The exporter and tracer provider are set up as the gateway's, by the ``OTEL_*`` environment variables
(off by default; ``sortyard.telemetry.exporter``); span and attribute names are the gateway's too
(``sortyard.telemetry.semconv``). A request is traced when its ``traceparent`` says sampled, or,
without one, with the ratio in ``SORTYARD_TRACE_SAMPLING_RATIO`` (default 0.01), applied as
``ParentBased(TraceIdRatioBased(ratio))`` (``sortyard.telemetry.server_span``: a request that is not
traced costs a random number and a compare).

The spans are written when the request ends, from timestamps taken as it runs (no span is open while
the engine works): queue wait from submission to the scheduler's first pick
(``RequestOutput.metrics.first_scheduled_s``), prefill from there to the first token, decode from the
first token to the last. An engine whose outputs lack that time (another implementation behind the
same server) gets a zero queue wait with prefill covering it, marked
``sortyard.engine.timing = derived``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Status, StatusCode

from sortyard.telemetry import semconv as sc
from sortyard.telemetry.exporter import exporter_from_env, tracer_provider
from sortyard.telemetry.server_span import PresetTraceIds, start_server_span

DEFAULT_RATIO = 0.01
SERVICE_NAME = "sortyard-engine"


def _ns(perf_s: float, offset_ns: int) -> int:
    return int(perf_s * 1e9) + offset_ns


class EngineTracer:
    """Starts request traces in the engine server; ``enabled`` False (and ``start`` None) without an
    exporter."""

    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        ratio: float = DEFAULT_RATIO,
        export_each: bool = False,
        service_name: str = SERVICE_NAME,
    ) -> None:
        """``export_each``: export every span as it ends (the test file exporter), not in batches."""
        self.ratio = ratio
        self.enabled = exporter is not None
        self.provider: TracerProvider | None = None
        self._root = TraceIdRatioBased(ratio)
        self._ids = PresetTraceIds()
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
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineTracer:
        env = os.environ if environ is None else environ
        ratio = float(env.get("SORTYARD_TRACE_SAMPLING_RATIO") or DEFAULT_RATIO)
        exporter, export_each = exporter_from_env(env)
        return cls(exporter, ratio=ratio, export_each=export_each)

    def start(self, headers: Mapping[str, str], operation: str, route: str) -> RequestTrace | None:
        if not self.enabled:
            return None
        offset_ns = time.time_ns() - time.perf_counter_ns()
        arrival_s = time.perf_counter()
        span = start_server_span(
            self.tracer,
            self._ids,
            self._root.bound,
            headers,
            sc.server_span_name("POST", route),
            {
                sc.HTTP_REQUEST_METHOD: "POST",
                sc.HTTP_ROUTE: route,
                sc.GEN_AI_OPERATION_NAME: operation,
            },
            start_time_ns=_ns(arrival_s, offset_ns),
        )
        return RequestTrace(self, span, offset_ns) if span is not None else None

    def force_flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


class RequestTrace:
    """One traced engine request: timestamps as it runs, spans when it ends (once)."""

    def __init__(self, tracer: EngineTracer, span: trace.Span, offset_ns: int) -> None:
        self.tracer = tracer
        self.span = span
        self.offset_ns = offset_ns
        self.submitted_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.is_done = False

    def describe(self, model: str, body: Any, is_stream: bool) -> None:
        """Request attributes: the model asked for and the GenAI request parameters of ``body``."""
        span = self.span
        span.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
        span.set_attribute(sc.IS_STREAM, is_stream)
        for field, attribute in sc.REQUEST_PARAMETERS.items():
            value = getattr(body, field, None)
            if isinstance(value, bool | int | float | str):
                span.set_attribute(
                    attribute, [value] if field == "stop" and isinstance(value, str) else value
                )

    def submitted(self, now_s: float) -> None:
        self.submitted_s = now_s

    def token(self, now_s: float) -> None:
        if self.first_token_s is None:
            self.first_token_s = now_s
        self.last_token_s = now_s

    def finish(self, output: Any | None, *, model: str | None = None, status: int = 200) -> None:
        """Write the phase spans and end the request's span (``output``: its last RequestOutput)."""
        if self.is_done:
            return
        self.is_done = True
        span = self.span
        span.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, status)
        if output is not None:
            self._phases(output)
            num_output = sum(len(c.token_ids) for c in output.outputs)
            span.set_attribute(sc.GEN_AI_RESPONSE_ID, output.request_id)
            span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, len(output.prompt_token_ids))
            span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, num_output)
            span.set_attribute(sc.ENGINE_NUM_CACHED_TOKENS, output.num_cached_tokens)
            reasons = [c.finish_reason or "abort" for c in output.outputs]
            span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
            if model is not None:
                span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, model)
        span.end()

    def fail(self, error: BaseException) -> None:
        """The request failed before (or instead of) finishing."""
        if self.is_done:
            return
        status = getattr(error, "status_code", 500)
        code = getattr(error, "code", None)
        self.span.set_attribute(sc.ERROR_TYPE, code or type(error).__name__)
        if not isinstance(error, Exception):
            self.span.set_attribute(sc.ERROR_TYPE, "cancelled")
        elif not isinstance(status, int) or status >= 500:
            self.span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        self.finish(None, status=status if isinstance(status, int) else 500)

    def _phases(self, output: Any) -> None:
        submitted, first, last = self.submitted_s, self.first_token_s, self.last_token_s
        if submitted is None or first is None or last is None:
            return
        metrics = getattr(output, "metrics", None)
        scheduled = getattr(metrics, "first_scheduled_s", None)
        timing = "engine" if isinstance(scheduled, float) and submitted <= scheduled <= first else "derived"
        if timing == "derived":
            scheduled = submitted
        assert scheduled is not None
        context = trace.set_span_in_context(self.span)
        start = self.tracer.tracer.start_span
        for name, begin, end in (
            (sc.ENGINE_QUEUE_SPAN, submitted, scheduled),
            (sc.ENGINE_PREFILL_SPAN, scheduled, first),
            (sc.ENGINE_DECODE_SPAN, first, last),
        ):
            child = start(
                name,
                context=context,
                start_time=_ns(begin, self.offset_ns),
                attributes={sc.ENGINE_TIMING: timing},
            )
            child.end(end_time=_ns(end, self.offset_ns))
