"""The engine's request traces: which requests are sampled, the SERVER span and its phase children,
and the exporter chosen by the environment (the cross-process trace is ``tests/e2e``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from backends.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from backends.serving.tracing import EngineTracer
from sortyard.telemetry import semconv as sc

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
NOT_SAMPLED = f"00-{CALLER_TRACE}-00f067aa0ba902b7-00"
ROUTE = "/v1/chat/completions"


def tracer(ratio: float = 0.0) -> tuple[EngineTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return EngineTracer(exporter, ratio=ratio, export_each=True), exporter


def output(first_scheduled_s: float | None) -> RequestOutput:
    choice = CompletionOutput(0, "hi", [5, 6], "stop", None)
    return RequestOutput("chatcmpl-1", [1, 2, 3], [choice], True, 2, RequestMetrics(first_scheduled_s))


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_off_without_an_exporter() -> None:
    engine_tracer = EngineTracer.from_env({})
    assert not engine_tracer.enabled
    assert engine_tracer.start({"traceparent": SAMPLED}, "chat", ROUTE) is None


def test_a_sampled_caller_is_followed_and_the_phases_hang_under_the_server_span() -> None:
    engine_tracer, exporter = tracer(ratio=0.0)
    trace = engine_tracer.start({"traceparent": SAMPLED}, "chat", ROUTE)
    assert trace is not None
    trace.describe("tiny", SimpleNamespace(max_tokens=8, stop="\n", n=None), is_stream=True)
    trace.submitted(1.0)
    trace.token(3.0)
    trace.token(4.0)
    trace.finish(output(first_scheduled_s=2.0), model="tiny")
    spans = by_name(exporter.get_finished_spans())
    server = spans[f"POST {ROUTE}"]
    assert f"{server.context.trace_id:032x}" == CALLER_TRACE
    assert server.parent is not None and f"{server.parent.span_id:016x}" == "00f067aa0ba902b7"
    attributes = dict(server.attributes or {})
    assert attributes[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[sc.GEN_AI_REQUEST_MODEL] == attributes[sc.GEN_AI_RESPONSE_MODEL] == "tiny"
    assert attributes["gen_ai.request.max_tokens"] == 8
    assert attributes["gen_ai.request.stop_sequences"] == ("\n",)
    assert attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == 3 and attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert attributes[sc.ENGINE_NUM_CACHED_TOKENS] == 2
    assert attributes[sc.HTTP_RESPONSE_STATUS_CODE] == 200
    queue, prefill, decode = (
        spans[n] for n in (sc.ENGINE_QUEUE_SPAN, sc.ENGINE_PREFILL_SPAN, sc.ENGINE_DECODE_SPAN)
    )
    for phase in (queue, prefill, decode):
        assert phase.parent is not None and phase.parent.span_id == server.context.span_id
        assert dict(phase.attributes or {})[sc.ENGINE_TIMING] == "engine"
    assert queue.end_time == prefill.start_time and prefill.end_time == decode.start_time
    assert decode.end_time is not None and prefill.start_time is not None
    assert decode.end_time - prefill.start_time == 2_000_000_000  # from the first schedule to the last token


def test_an_output_without_a_schedule_time_gets_derived_phases() -> None:
    engine_tracer, exporter = tracer()
    trace = engine_tracer.start({"traceparent": SAMPLED}, "text_completion", "/v1/completions")
    assert trace is not None
    trace.submitted(1.0)
    trace.token(2.0)
    trace.finish(output(first_scheduled_s=None))
    phases = [s for s in exporter.get_finished_spans() if s.name.startswith("engine.")]
    assert len(phases) == 3
    assert {dict(s.attributes or {})[sc.ENGINE_TIMING] for s in phases} == {"derived"}


def test_an_unsampled_caller_and_ratio_zero_trace_nothing() -> None:
    engine_tracer, _ = tracer(ratio=0.0)
    assert engine_tracer.start({"traceparent": NOT_SAMPLED}, "chat", ROUTE) is None
    assert engine_tracer.start({}, "chat", ROUTE) is None


def test_ratio_one_starts_new_traces() -> None:
    engine_tracer, exporter = tracer(ratio=1.0)
    trace = engine_tracer.start({"traceparent": "garbage"}, "chat", ROUTE)
    assert trace is not None
    trace.finish(None, status=200)
    trace.finish(None, status=500)  # ends once
    [server] = exporter.get_finished_spans()
    assert server.parent is None and server.context.trace_id != 0


def test_fail_marks_server_errors() -> None:
    engine_tracer, exporter = tracer()
    trace = engine_tracer.start({"traceparent": SAMPLED}, "chat", ROUTE)
    assert trace is not None
    trace.fail(RuntimeError("boom"))
    [server] = exporter.get_finished_spans()
    attributes = dict(server.attributes or {})
    assert attributes[sc.ERROR_TYPE] == "RuntimeError"
    assert attributes[sc.HTTP_RESPONSE_STATUS_CODE] == 500
    assert server.status.status_code.name == "ERROR"


def test_the_test_span_file_gets_one_json_line_per_span(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    engine_tracer = EngineTracer.from_env({"SORTYARD_TEST_SPAN_FILE": str(path)})
    trace = engine_tracer.start({"traceparent": SAMPLED}, "chat", ROUTE)
    assert trace is not None
    trace.finish(None)
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["kind"] == "SERVER" and record["trace_id"] == CALLER_TRACE
    assert record["service"] == "sortyard-engine"
