"""W3C trace context: the ``traceparent`` header read into a span context and written from one."""

from __future__ import annotations

from opentelemetry.trace import SpanContext, TraceFlags

__all__ = ["parse_traceparent", "traceparent_of"]

_HEX = frozenset("0123456789abcdefABCDEF")


def parse_traceparent(value: str) -> SpanContext | None:
    """A W3C ``traceparent`` (version 00 layout) as a remote span context; None when malformed."""
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, trace_hex, span_hex, flags_hex = parts[:4]
    if (
        len(trace_hex) != 32
        or len(span_hex) != 16
        or len(flags_hex) != 2
        or (version == "00" and len(parts) > 4)
        or not _HEX.issuperset(version + trace_hex + span_hex + flags_hex)  # int() takes "+", "_", " "
    ):
        return None
    trace_id, span_id, flags = int(trace_hex, 16), int(span_hex, 16), int(flags_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def traceparent_of(context: SpanContext) -> str:
    """The ``traceparent`` header (version 00) that passes ``context`` on."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
