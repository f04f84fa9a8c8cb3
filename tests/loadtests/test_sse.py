"""loadtests/sse.py: TTFT, tokens/s and failures measured from SSE lines."""

from __future__ import annotations

import json

from loadtests.sse import StreamMeter


def _event(delta: dict[str, object] | None = None, usage: dict[str, int] | None = None) -> str:
    body: dict[str, object] = {"object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    if usage is not None:
        body["usage"] = usage
    return "data: " + json.dumps(body)


def test_ttft_and_tokens_per_second_from_content_chunks() -> None:
    meter = StreamMeter(started_s=10.0)
    meter.feed(_event({"role": "assistant", "content": ""}), 10.1)  # role chunk: not a token
    meter.feed("", 10.1)
    meter.feed(_event({"content": "Hel"}).encode(), 10.25)
    for i in range(1, 5):
        meter.feed(_event({"content": "lo"}), 10.25 + i * 0.05)
    meter.feed(_event({}), 10.5)
    meter.feed(_event(usage={"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}), 10.5)
    meter.feed("data: [DONE]", 10.5)
    assert meter.ttft_ms is not None and abs(meter.ttft_ms - 250.0) < 1e-6
    assert meter.tokens_per_s is not None and abs(meter.tokens_per_s - 4 / 0.2) < 1e-6
    assert meter.num_content_chunks == 5
    assert meter.num_output_tokens == 7  # the usage chunk wins over counting chunks
    assert meter.problem() is None


def test_without_usage_counts_chunks_and_one_chunk_has_no_speed() -> None:
    meter = StreamMeter(started_s=0.0)
    meter.feed(_event({"content": "Hi"}), 0.1)
    meter.feed("data: [DONE]", 0.1)
    assert meter.num_output_tokens == 1
    assert meter.tokens_per_s is None
    assert meter.problem() is None


def test_tool_call_deltas_count_as_tokens() -> None:
    meter = StreamMeter(started_s=0.0)
    meter.feed(_event({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), 0.2)
    assert meter.ttft_ms is not None and abs(meter.ttft_ms - 200.0) < 1e-6


def test_error_event_missing_done_and_bad_json_are_problems() -> None:
    errored = StreamMeter(started_s=0.0)
    errored.feed('data: {"error": {"message": "upstream broke", "type": "server_error"}}', 0.1)
    errored.feed("data: [DONE]", 0.1)
    assert errored.problem() == "error event: upstream broke"

    cut = StreamMeter(started_s=0.0)
    cut.feed(_event({"content": "a"}), 0.1)
    assert cut.problem() == "the stream ended without data: [DONE]"

    garbled = StreamMeter(started_s=0.0)
    garbled.feed("data: {not json", 0.1)
    garbled.feed("data: [1, 2]", 0.1)
    garbled.feed("data: [DONE]", 0.1)
    assert (garbled.problem() or "").startswith("an event that is not JSON")


def test_comments_and_other_fields_are_ignored() -> None:
    meter = StreamMeter(started_s=0.0)
    for line in (": keep-alive", "event: message", "id: 3", "retry: 100"):
        meter.feed(line, 0.1)
    meter.feed('data: {"choices": ["not a dict"]}', 0.1)
    assert meter.first_content_s is None and meter.error is None
