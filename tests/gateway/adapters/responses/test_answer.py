"""gateway/adapters/responses/answer.py: a chat completion as a ``Response`` object the SDK accepts."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from openai.types.responses import Response

from gateway.adapters.responses.answer import ResponseDraft, usage_of
from gateway.errors import UpstreamProtocolError


def _chat(message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None) -> bytes:
    return msgspec.json.encode(
        {
            "id": "chatcmpl-1",
            "model": "served",
            "created": 1,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage or {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    )


def _complete(request: dict[str, Any], chat: bytes) -> Response:
    return Response.model_validate(msgspec.json.decode(ResponseDraft(request).complete(chat)))


def test_text_is_a_message_item_and_the_request_is_echoed() -> None:
    request = {
        "model": "served",
        "input": "x",
        "instructions": "Be kind.",
        "temperature": 0.5,
        "max_output_tokens": 10,
    }
    response = _complete(request, _chat({"role": "assistant", "content": "Hi there"}))
    assert (
        response.id.startswith("resp_") and response.object == "response" and response.status == "completed"
    )
    assert response.output_text == "Hi there" and response.output[0].id.startswith("msg_")  # type: ignore[union-attr]
    assert (
        response.instructions == "Be kind."
        and response.temperature == 0.5
        and response.max_output_tokens == 10
    )
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        5,
        2,
        7,
    )
    assert response.tool_choice == "auto" and response.tools == [] and response.parallel_tool_calls


def test_tool_calls_are_function_call_items() -> None:
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    response = _complete({"model": "m"}, _chat({"content": None, "tool_calls": calls}, "tool_calls"))
    assert [(item.type, item.call_id, item.name) for item in response.output] == [  # type: ignore[union-attr]
        ("function_call", "call_a", "f"),
        ("function_call", "call_b", "g"),
    ]
    assert response.output[0].id.startswith("fc_") and response.output[0].arguments == '{"x": 1}'  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")]
)
def test_a_cut_answer_is_incomplete_with_its_reason(finish: str, reason: str) -> None:
    response = _complete({"model": "m"}, _chat({"content": "Hal"}, finish))
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == reason


def test_an_empty_answer_is_one_empty_message() -> None:
    response = _complete({"model": "m"}, _chat({"content": ""}))
    assert len(response.output) == 1 and response.output_text == ""


def test_usage_details_carry_over() -> None:
    usage = usage_of(
        {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 8},
            "completion_tokens_details": {"reasoning_tokens": 1},
        }
    )
    assert usage is not None and usage["input_tokens_details"]["cached_tokens"] == 8
    assert usage["output_tokens_details"] == {"reasoning_tokens": 1} and usage["total_tokens"] == 13
    assert usage_of(None) is None


def test_a_body_that_is_not_a_chat_completion_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        ResponseDraft({"model": "m"}).complete(b'{"object": "list"}')
    with pytest.raises(UpstreamProtocolError):
        ResponseDraft({"model": "m"}).complete(b"<html>")
