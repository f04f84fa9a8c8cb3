"""A chat stream as Anthropic's event sequence: text blocks, tool_use blocks with input_json_delta pieces,
the usage chunk into message_delta, errors as error events; split anywhere, the same events."""

from __future__ import annotations

import json
from typing import Any

from gateway.anthropic.events import MessagesStream


def sse(chunk: dict[str, Any] | str) -> bytes:
    return b"data: " + (chunk if isinstance(chunk, str) else json.dumps(chunk)).encode() + b"\n\n"


def delta(**fields: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "model": "claude-x",
        "choices": [{"index": 0, "delta": fields, "finish_reason": None}],
    }


def finish(reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "model": "claude-x",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
    }


USAGE = {
    "id": "chatcmpl-9",
    "model": "claude-x",
    "choices": [],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3},
}


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = block.split("\n", 1)
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


TEXT_STREAM = b"".join(
    [
        sse(delta(role="assistant", content="")),
        sse(delta(content="Hel")),
        sse(delta(content="lo")),
        sse(finish("stop")),
        sse(USAGE),
        sse("[DONE]"),
    ]
)


def test_a_text_stream() -> None:
    got = events(MessagesStream("claude-x").feed(TEXT_STREAM))
    assert [name for name, _ in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0][1]["message"]["id"] == "msg_9" and got[0][1]["message"]["content"] == []
    assert "".join(d["delta"]["text"] for n, d in got if n == "content_block_delta") == "Hello"
    assert got[6][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert got[6][1]["usage"]["output_tokens"] == 3 and got[6][1]["usage"]["input_tokens"] == 10


def test_split_at_every_byte_gives_the_same_events() -> None:
    whole = MessagesStream("claude-x").feed(TEXT_STREAM)
    stream = MessagesStream("claude-x")
    pieces = b"".join(stream.feed(TEXT_STREAM[i : i + 1]) for i in range(len(TEXT_STREAM)))
    assert pieces == whole


def test_tool_calls_become_tool_use_blocks() -> None:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    raw = b"".join(
        [
            sse(delta(content="Checking.")),
            sse(delta(tool_calls=[call])),
            sse(delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}])),
            sse(delta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}])),
            sse(finish("tool_calls")),
            sse("[DONE]"),
        ]
    )
    got = events(MessagesStream("claude-x").feed(raw))
    starts = [d for n, d in got if n == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    assert starts[1]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {},
    }
    pieces = [d["delta"]["partial_json"] for n, d in got if n == "content_block_delta" and d["index"] == 1]
    assert json.loads("".join(pieces)) == {"city": "Paris"}
    assert [d["index"] for n, d in got if n == "content_block_stop"] == [0, 1]
    assert next(d for n, d in got if n == "message_delta")["delta"]["stop_reason"] == "tool_use"


def test_an_error_event_ends_the_stream() -> None:
    raw = sse(delta(content="Hi")) + sse({"error": {"message": "upstream timed out", "type": "server_error"}})
    stream = MessagesStream("claude-x")
    got = events(stream.feed(raw))
    assert got[-1][0] == "error" and got[-1][1]["error"]["message"] == "upstream timed out"
    assert stream.feed(sse("[DONE]")) == b""


def test_an_empty_stream_still_starts_and_stops() -> None:
    got = events(MessagesStream("claude-x").feed(sse("[DONE]")))
    assert [name for name, _ in got] == ["message_start", "ping", "message_delta", "message_stop"]
