"""A chat completion as a Messages answer: text and tool_use blocks, stop reasons, usage with cache reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.anthropic.answer import message_id, stop_reason, to_message
from gateway.errors import UpstreamProtocolError


def completion(message: dict[str, Any], finish: str = "stop", **choice: Any) -> bytes:
    usage = {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 16}}
    body = {
        "id": "chatcmpl-abc",
        "model": "claude-x",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
        "usage": usage,
    }
    return json.dumps(body).encode()


def test_text_answer() -> None:
    answer = json.loads(to_message(completion({"role": "assistant", "content": "Paris."})))
    assert answer == {
        "id": "msg_abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "Paris."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 14,
            "output_tokens": 5,
            "cache_read_input_tokens": 16,
            "cache_creation_input_tokens": 0,
        },
    }


def test_tool_calls_become_tool_use_blocks() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
        ],
    }
    answer = json.loads(to_message(completion(message, "tool_calls")))
    assert answer["stop_reason"] == "tool_use"
    assert answer["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
        {"type": "tool_use", "id": "call_2", "name": "g", "input": {"_raw_arguments": "not json"}},
    ]


@pytest.mark.parametrize(
    ("finish", "matched", "stop", "expected"),
    [
        ("stop", None, None, ("end_turn", None)),
        ("stop", "END", ["END"], ("stop_sequence", "END")),
        ("stop", 2, ["END"], ("end_turn", None)),
        ("length", None, None, ("max_tokens", None)),
        ("tool_calls", None, None, ("tool_use", None)),
        (None, None, None, (None, None)),
    ],
)
def test_stop_reasons(finish: Any, matched: Any, stop: Any, expected: tuple[Any, Any]) -> None:
    assert stop_reason(finish, matched, stop) == expected


def test_ids_and_bad_bodies() -> None:
    assert message_id("chatcmpl-1") == "msg_1" and message_id("msg_1") == "msg_1"
    with pytest.raises(UpstreamProtocolError):
        to_message(b'{"choices": []}')
