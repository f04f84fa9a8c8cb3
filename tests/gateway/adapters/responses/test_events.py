"""gateway/adapters/responses/events.py: a chat stream as the Responses event stream, each event valid
for the SDK's ``ResponseStreamEvent`` union, numbered in order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.adapters.responses.answer import ResponseDraft
from gateway.adapters.responses.events import ResponseEvents
from gateway.errors import UpstreamProtocolError

_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _sse(*chunks: Any) -> bytes:
    return b"".join(
        b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "model": "served", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"id": "c", "model": "served", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}


def _run(stream: bytes, *, split: int = 7) -> tuple[list[dict[str, Any]], bytes]:
    """Feed ``stream`` in reads of ``split`` bytes; the events, each checked by the SDK, and the raw bytes."""
    events = ResponseEvents(ResponseDraft({"model": "served", "input": "x"}))
    out = b"".join(events.feed(stream[i : i + split]) for i in range(0, len(stream), split)) + events.end()
    parsed = []
    for raw in out.split(b"\n\n"):
        if raw:
            kind, data = raw.split(b"\n", 1)
            document = json.loads(data[len(b"data: ") :])
            assert kind == b"event: " + document["type"].encode()
            _EVENT.validate_python(document)
            parsed.append(document)
    return parsed, out


def test_text_deltas_are_framed_by_their_item_and_part_events() -> None:
    stream = _sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk({}, "stop"),
        USAGE,
        b"[DONE]",
    )
    events, _ = _run(stream)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[6]["text"] == "Hello" and events[8]["item"]["status"] == "completed"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 4 and final["usage"]["output_tokens"] == 2
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["id"] == final["id"]


def test_text_then_tool_calls_are_items_in_order() -> None:
    first = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a"'}}
    second = {"index": 1, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}
    stream = _sse(
        _chunk({"content": "Let me check."}),
        _chunk({"tool_calls": [first]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        _chunk({"tool_calls": [second]}),
        _chunk({}, "tool_calls"),
        b"[DONE]",
    )
    events, _ = _run(stream, split=11)
    types = [e["type"] for e in events]
    assert types.count("response.function_call_arguments.delta") == 3
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"], e["output_index"]) for e in done] == [
        ("f", '{"a": 1}', 1),
        ("g", "{}", 2),
    ]
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "function_call"]
    assert output[1]["call_id"] == "call_1" and output[1]["id"].startswith("fc_")
    assert types.index("response.output_item.done") < types.index("response.function_call_arguments.delta")


def test_each_call_is_done_before_the_next_is_added() -> None:
    """As OpenAI's own stream: an agent can run the first call while the second streams."""
    first = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    second = {"index": 1, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}
    stream = _sse(_chunk({"tool_calls": [first]}), _chunk({"tool_calls": [second]}), _chunk({}, "tool_calls"))
    events, _ = _run(stream + _sse(b"[DONE]"))
    calls = [
        (e["type"], e["output_index"])
        for e in events
        if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert calls == [
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.output_item.done", 1),
    ]
    two_in_one_chunk = _sse(_chunk({"tool_calls": [first, second]}), _chunk({}, "tool_calls"), b"[DONE]")
    events, _ = _run(two_in_one_chunk)
    assert [e["item"]["name"] for e in events if e["type"] == "response.output_item.done"] == ["f", "g"]


def test_going_back_to_a_finished_call_is_a_protocol_error() -> None:
    first = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{"}}
    second = {"index": 1, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}
    late = {"index": 0, "function": {"arguments": "}"}}
    with pytest.raises(UpstreamProtocolError):
        _run(
            _sse(
                _chunk({"tool_calls": [first]}),
                _chunk({"tool_calls": [second]}),
                _chunk({"tool_calls": [late]}),
            )
        )


def test_a_length_finish_is_response_incomplete() -> None:
    events, _ = _run(_sse(_chunk({"content": "Hal"}), _chunk({}, "length"), b"[DONE]"))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_cut_before_done_ends_with_nothing_more() -> None:
    events, _ = _run(_sse(_chunk({"content": "Hal"})))
    assert events[-1]["type"] == "response.output_text.delta"


def test_an_error_event_is_the_apis_error_event() -> None:
    error = {"error": {"message": "overloaded", "type": "server_error", "code": "busy", "param": None}}
    events, _ = _run(_sse(_chunk({"content": "a"}), error))
    assert (
        events[-1]["type"] == "error"
        and events[-1]["message"] == "overloaded"
        and events[-1]["code"] == "busy"
    )


def test_an_empty_stream_still_has_one_message() -> None:
    events, _ = _run(_sse(_chunk({}, "stop"), b"[DONE]"))
    assert events[-1]["type"] == "response.completed" and len(events[-1]["response"]["output"]) == 1


def test_crlf_and_comments_are_read() -> None:
    stream = (
        _sse(_chunk({"content": "x"})) + b": keep-alive\n\n" + _sse(_chunk({}, "stop"), b"[DONE]")
    ).replace(b"\n", b"\r\n")
    events, _ = _run(stream, split=3)
    assert events[-1]["type"] == "response.completed"


def test_a_chunk_that_is_not_json_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        _run(_sse(b"{nope"))
