"""An upstream's error about the translated chat request names the Messages field the client sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.anthropic.errors import from_openai_body
from gateway.anthropic.params import MessagesParams
from gateway.anthropic.request import translate

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "system": "Be brief.",
    "tools": [TOOL, {**TOOL, "name": "other"}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here:"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
            ],
        },
    ],
}


def params(**fields: Any) -> MessagesParams:
    chat, found = translate(json.dumps({**REQUEST, **fields}).encode())
    assert len(found.sources) == len(chat["messages"])
    return found


def test_each_chat_message_knows_its_turn_or_block() -> None:
    """The system prompt takes the first chat message and a tool result goes before the turn's text."""
    assert params().sources == [
        "system",
        "messages.0.content",
        "messages.1",
        "messages.2.content.1",
        "messages.2.content",
    ]


@pytest.mark.parametrize(
    ("chat", "messages"),
    [
        ("messages[1].content", "messages.0.content"),
        ("messages[0]", "system"),
        ("messages[3].content", "messages.2.content.1"),
        ("messages[9].content", "messages"),  # no such chat message: the list as a whole
        ("messages", "messages"),
        ("tools[1].function.parameters.properties", "tools.1.input_schema.properties"),
        ("tools[0].function.name", "tools.0.name"),
        ("tools", "tools"),
        ("max_completion_tokens", "max_tokens"),
        ("max_tokens", "max_tokens"),
        ("stop[0]", "stop_sequences.0"),
        ("user", "metadata.user_id"),
        ("parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
        ("response_format.json_schema.schema", "output_config.format"),
        ("temperature", "temperature"),
        ("not a path!", "not a path!"),
    ],
)
def test_a_chat_field_is_named_as_the_client_sent_it(chat: str, messages: str) -> None:
    assert params().param(chat) == messages


def test_structured_output_asked_the_old_way_is_named_so() -> None:
    schema = {"type": "json_schema", "schema": {"type": "object"}}
    assert params(output_format=schema).param("response_format") == "output_format"
    assert params(output_config={"format": schema}).param("response_format") == "output_config.format"


def test_a_path_leading_the_message_is_renamed_and_a_word_is_not() -> None:
    found = params()
    assert (
        found.message("tools[0].function.parameters (get_weather): bad")
        == "tools.0.input_schema (get_weather): bad"
    )
    assert found.message("user must be a string") == "user must be a string"


def test_an_upstream_error_reads_in_the_clients_terms() -> None:
    """Behind our engine: an image to a text-only model, with a system prompt shifting the index."""
    upstream = {
        "error": {
            "message": "Only text content parts are supported, got 'image_url'",
            "type": "invalid_request_error",
            "param": "messages[1].content",
            "code": None,
        }
    }
    body = json.loads(from_openai_body(400, json.dumps(upstream).encode(), "req-1", params()))
    assert (
        body["error"]["message"]
        == "messages.0.content: Only text content parts are supported, got 'image_url'"
    )
    tool_error = {"error": {"message": "tools[1].function.parameters (other): bad", "param": "tools"}}
    body = json.loads(from_openai_body(400, json.dumps(tool_error).encode(), None, params()))
    assert body["error"]["message"] == "tools.1.input_schema (other): bad"  # named once, not twice
