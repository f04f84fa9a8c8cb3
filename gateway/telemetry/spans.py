"""The spans of one sampled request: its SERVER span, a child per pipeline stage, a CLIENT span per
upstream attempt, with the GenAI semantic-convention attributes (``sortyard.telemetry.semconv``, and
``gateway.telemetry.semconv`` for the names only the gateway writes).

``gateway.telemetry.tracing.GatewayTracer.start_request`` starts a ``RequestSpan``; the request's
owner (``gateway.proxy``) puts it on the ``Call`` and ends it when the response is over.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from gateway.errors import GatewayError
from gateway.pipeline import Call, Stage
from gateway.policy.telemetry import TelemetryConfig
from gateway.telemetry import semconv as gw
from sortyard.telemetry import semconv as sc
from sortyard.telemetry.traceparent import traceparent_of

__all__ = ["AttemptSpan", "RequestSpan"]


def _scalar(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


class RequestSpan:
    """One sampled request: its SERVER span, the stage spans under it, its upstream CLIENT spans."""

    __slots__ = ("config", "context", "current", "span", "tracer")

    def __init__(self, tracer: trace.Tracer, span: trace.Span, config: TelemetryConfig) -> None:
        self.tracer = tracer
        self.span = span
        self.config = config
        self.context = trace.set_span_in_context(span)
        self.current = self.context
        """The context new child spans hang from (the running stage's, else the server span's)."""

    @property
    def captures_content(self) -> bool:
        """Prompt and completion text go on spans (the policy's ``telemetry.capture_content``)."""
        return self.config.capture_content

    @property
    def trace_id(self) -> int:
        return self.span.get_span_context().trace_id

    def describe_call(self, call: Call) -> None:
        """Request-side attributes, once the body is decoded."""
        span = self.span
        span.set_attribute(sc.GEN_AI_OPERATION_NAME, call.endpoint.operation)
        span.set_attribute(sc.GEN_AI_REQUEST_MODEL, call.model)
        span.set_attribute(gw.REQUEST_ID, call.request_id)
        span.set_attribute(sc.IS_STREAM, call.is_stream)
        for field, attribute in sc.REQUEST_PARAMETERS.items():
            value = call.body.get(field)
            if value is not None:
                if isinstance(value, str) and field == "stop":
                    value = [value]
                value = _scalar(value)
                if value is not None:
                    span.set_attribute(attribute, value)

    async def run_stage(self, stage: Stage, call: Call) -> None:
        """Await one stage inside its own child span."""
        span = self.tracer.start_span(gw.stage_span_name(stage.name), context=self.context)
        self.current = trace.set_span_in_context(span)
        try:
            await stage(call)
        except BaseException as error:
            _mark_error(span, error)
            raise
        finally:
            self.current = self.context
            span.end()

    def start_attempt(self, call: Call, model: str, label: str, attempt: int) -> AttemptSpan:
        """A CLIENT span ``chat {model}`` for one upstream attempt (model: the replica's served name)."""
        host, _, port = label.rpartition(":")
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: call.endpoint.operation,
            gw.GEN_AI_PROVIDER_NAME: self.config.provider_name,
            sc.GEN_AI_REQUEST_MODEL: model,
            gw.REPLICA: label,
            gw.ATTEMPT: attempt,
            gw.SERVER_ADDRESS: host or label,
        }
        if port.isdigit():
            attributes[gw.SERVER_PORT] = int(port)
        if call.pool is not None:
            attributes[gw.POOL] = call.pool
        if self.config.capture_content:
            content = call.body.get("messages") or call.body.get("prompt") or call.body.get("input")
            if content is not None:
                attributes[gw.GEN_AI_INPUT_MESSAGES] = json.dumps(content, default=str)
        span = self.tracer.start_span(
            gw.inference_span_name(call.endpoint.operation, model),
            context=self.current,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return AttemptSpan(span, model)

    def finish(self, call: Call | None, status: int, error: GatewayError | None) -> None:
        """Response-side attributes, then end the SERVER span."""
        span = self.span
        span.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, status)
        if call is not None:
            span.set_attribute(gw.TENANT, call.tenant)
            if call.pool is not None:
                span.set_attribute(gw.POOL, call.pool)
            if call.replica is not None:
                span.set_attribute(gw.REPLICA, call.replica.label)
            if call.route_reason is not None:
                span.set_attribute(gw.ROUTE_REASON, call.route_reason)
            if call.cache_status is not None:
                span.set_attribute(gw.CACHE_RESULT, call.cache_status)
            if call.result is not None:
                span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, call.model)
            _set_usage(span, call)
            error = error or call.error
        if error is not None:
            span.set_attribute(sc.ERROR_TYPE, error.code or type(error).__name__)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, error.message[:200]))
        span.end()


class AttemptSpan:
    """One upstream attempt's CLIENT span; ends once, with the call's outcome."""

    __slots__ = ("model", "span")

    def __init__(self, span: trace.Span, model: str) -> None:
        self.span = span
        self.model = model

    @property
    def traceparent(self) -> str:
        return traceparent_of(self.span.get_span_context())

    def record_output(self, content: list[Any]) -> None:
        """The completion text (only called when the policy captures content)."""
        self.span.set_attribute(gw.GEN_AI_OUTPUT_MESSAGES, json.dumps(content, default=str))

    def end(self, call: Call, error: BaseException | None = None) -> None:
        span = self.span
        if not span.is_recording():
            return  # already ended
        if error is None:
            span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, self.model)
            _set_usage(span, call)
        else:
            _mark_error(span, error)
        span.end()


def _set_usage(span: trace.Span, call: Call) -> None:
    if call.usage is not None:
        span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, call.usage.input_tokens)
        span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, call.usage.output_tokens)
    if call.finish_reasons:
        span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, list(call.finish_reasons))


def _mark_error(span: trace.Span, error: BaseException) -> None:
    if not isinstance(error, Exception):  # cancelled: the client went away, not a failure of ours
        span.set_attribute(sc.ERROR_TYPE, "cancelled")
        return
    code = getattr(error, "code", None)
    span.set_attribute(sc.ERROR_TYPE, code or type(error).__name__)
    status = getattr(error, "status", 500)
    if not isinstance(status, int) or status >= 500:
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
