"""sortyard/telemetry/server_span.py: a caller's sampled traceparent is followed, an unsampled one left
alone, a new trace sampled on a trace id drawn before any SDK object exists, which the SDK then uses."""

from __future__ import annotations

from opentelemetry.sdk.trace import Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from sortyard.telemetry.exporter import tracer_provider
from sortyard.telemetry.server_span import PresetTraceIds, start_server_span

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{SPAN}-01"
NOT_SAMPLED = f"00-{TRACE}-{SPAN}-00"
LOW_64 = (1 << 64) - 1


class Setup:
    """A provider as both servers build it: ParentBased(TraceIdRatioBased(ratio)), preset trace ids."""

    def __init__(self, ratio: float) -> None:
        self.root = TraceIdRatioBased(ratio)
        self.ids = PresetTraceIds()
        self.exporter = InMemorySpanExporter()
        provider = tracer_provider(
            self.exporter,
            service_name="test",
            sampler=ParentBased(self.root),
            id_generator=self.ids,
            export_each=True,
        )
        self.tracer = provider.get_tracer("test")

    def start(self, headers: dict[str, str], start_time_ns: int | None = None) -> Span | None:
        span = start_server_span(
            self.tracer, self.ids, self.root.bound, headers, "POST /x", {"k": "v"}, start_time_ns
        )
        assert span is None or isinstance(span, Span)
        return span


def test_a_sampled_caller_is_followed_whatever_the_ratio() -> None:
    setup = Setup(ratio=0.0)
    span = setup.start({"traceparent": SAMPLED}, start_time_ns=1_000)
    assert span is not None
    span.end()
    [finished] = setup.exporter.get_finished_spans()
    assert finished.kind is SpanKind.SERVER and finished.name == "POST /x"
    assert f"{finished.context.trace_id:032x}" == TRACE
    assert finished.parent is not None and f"{finished.parent.span_id:016x}" == SPAN
    assert finished.parent.is_remote
    assert finished.start_time == 1_000 and dict(finished.attributes or {}) == {"k": "v"}


def test_the_callers_tracestate_is_kept() -> None:
    setup = Setup(ratio=0.0)
    span = setup.start({"traceparent": SAMPLED, "tracestate": "vendor=abc,other=1"})
    assert span is not None
    state = span.get_span_context().trace_state
    assert state.get("vendor") == "abc" and state.get("other") == "1"


def test_an_unsampled_caller_is_not_traced_whatever_the_ratio() -> None:
    setup = Setup(ratio=1.0)
    assert setup.start({"traceparent": NOT_SAMPLED}) is None
    assert setup.exporter.get_finished_spans() == ()


def test_a_new_trace_at_ratio_zero_makes_nothing() -> None:
    setup = Setup(ratio=0.0)
    assert all(setup.start({}) is None for _ in range(1000))
    assert setup.ids.next_trace_id == 0


def test_a_new_trace_uses_the_id_it_was_sampled_on() -> None:
    setup = Setup(ratio=0.5)
    started = [setup.start({}) for _ in range(2000)]
    spans = [span for span in started if span is not None]
    assert 800 <= len(spans) <= 1200
    for span in spans:
        context = span.get_span_context()
        assert (context.trace_id & LOW_64) < setup.root.bound  # the fast path's rule, the SDK's id
        assert span.parent is None
        assert span.is_recording()
    assert setup.ids.next_trace_id == 0  # handed over, not left for the next span


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    setup = Setup(ratio=1.0)
    span = setup.start({"traceparent": "garbage"})
    assert span is not None
    assert f"{span.get_span_context().trace_id:032x}" != TRACE
    assert span.parent is None


def test_preset_ids_hand_over_once_then_draw() -> None:
    ids = PresetTraceIds()
    ids.next_trace_id = 1234
    assert ids.generate_trace_id() == 1234
    assert ids.next_trace_id == 0
    assert ids.generate_trace_id() not in (0, 1234)
