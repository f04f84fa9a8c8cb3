"""The SERVER span of a request, continuing the caller's W3C ``traceparent``, sampled as
``ParentBased(TraceIdRatioBased(ratio))``: a caller's sampled ``traceparent`` is followed, an unsampled
one is passed through untouched.

The decision for a new trace is made before any SDK object exists: a random trace id tested with
TraceIdRatioBased's own rule (its ``bound``), then handed to the SDK through :class:`PresetTraceIds`,
whose ratio sampler agrees. A request that is not traced costs a random number and a compare.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind
from opentelemetry.trace.span import TraceState

from sortyard.telemetry.traceparent import parse_traceparent

__all__ = ["PresetTraceIds", "start_server_span"]

_LOW_64 = (1 << 64) - 1
_getrandbits = random.getrandbits


class PresetTraceIds(RandomIdGenerator):
    """Hands the SDK the trace id the fast path already drew (and sampled on)."""

    def __init__(self) -> None:
        self.next_trace_id = 0

    def generate_trace_id(self) -> int:
        trace_id, self.next_trace_id = self.next_trace_id, 0
        return trace_id or super().generate_trace_id()


def start_server_span(
    tracer: trace.Tracer,
    ids: PresetTraceIds,
    bound: int,
    headers: Mapping[str, str],
    name: str,
    attributes: Mapping[str, Any],
    start_time_ns: int | None = None,
) -> trace.Span | None:
    """A SERVER span continuing the caller's ``traceparent``; None when not sampled.

    ``tracer`` comes from a provider whose sampler is ``ParentBased(root)`` and whose id generator is
    ``ids``; ``bound`` is ``root.bound`` (TraceIdRatioBased's: a new trace is sampled when the low 64
    bits of its id are below it)."""
    value = headers.get("traceparent")
    parent = parse_traceparent(value) if value else None
    if parent is None:  # a new trace: sample on a trace id drawn here
        trace_id = _getrandbits(128)
        if (trace_id & _LOW_64) >= bound or trace_id == 0:
            return None  # the common case
        ids.next_trace_id = trace_id
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
    span = tracer.start_span(
        name, context=context, kind=SpanKind.SERVER, attributes=attributes, start_time=start_time_ns
    )
    if not span.is_recording():  # the SDK disagreed (cannot happen with this sampler): drop it
        return None
    return span
