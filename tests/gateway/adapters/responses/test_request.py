"""gateway/adapters/responses/request.py: a Responses request as a chat completions request."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.adapters.responses.request import chat_request
from gateway.errors import InvalidRequest


def test_a_string_input_and_instructions_are_a_system_and_a_user_message() -> None:
    chat = chat_request(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": "Hi",
            "max_output_tokens": 9,
            "temperature": 0.2,
        },
        stream=False,
    )
    assert chat == {
        "model": "m",
        "temperature": 0.2,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 9,
    }


def test_input_items_become_messages_tool_calls_and_tool_messages() -> None:
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "Rules."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "now?"}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "reasoning", "summary": []},
    ]
    messages = chat_request({"model": "m", "input": items}, stream=False)["messages"]
    assert messages == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Weather now?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]


def test_a_call_without_an_assistant_message_before_it_gets_its_own() -> None:
    items = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    assert chat_request({"model": "m", "input": items}, stream=False)["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]


def test_an_image_part_is_a_chat_image_part() -> None:
    parts = [
        {"type": "input_text", "text": "What?"},
        {"type": "input_image", "image_url": "data:x", "detail": "low"},
    ]
    messages = chat_request({"model": "m", "input": [{"role": "user", "content": parts}]}, stream=False)[
        "messages"
    ]
    assert messages[0]["content"] == [
        {"type": "text", "text": "What?"},
        {"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}},
    ]


def test_function_tools_tool_choice_and_text_format_map_to_chat() -> None:
    tool = {
        "type": "function",
        "name": "f",
        "description": "d",
        "parameters": {"type": "object"},
        "strict": True,
    }
    schema = {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}
    chat = chat_request(
        {
            "model": "m",
            "input": "x",
            "tools": [tool],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": schema},
        },
        stream=True,
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    json_object = chat_request(
        {"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}, stream=False
    )
    assert json_object["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat_request(
        {"model": "m", "input": "x", "text": {"format": {"type": "text"}}}, stream=False
    )


def test_gateway_fields_and_extras_pass_and_state_fields_do_not() -> None:
    body = {
        "model": "m",
        "input": "x",
        "store": True,
        "metadata": {"a": "b"},
        "priority": 3,
        "seed": 7,
        "user": "u",
        "stream": False,
    }
    chat = chat_request(body, stream=False)
    assert chat["priority"] == 3 and chat["seed"] == 7 and chat["user"] == "u"
    assert "store" not in chat and "metadata" not in chat and "stream" not in chat


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"reasoning": {"effort": "low"}}, "reasoning"),
        ({"background": True}, "background"),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"conversation": {"id": "conv"}}, "conversation"),
        ({"prompt": {"id": "pmpt"}}, "prompt"),
        ({"truncation": "auto"}, "truncation"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format"),
        ({"text": 5}, "text"),
        ({"text": "json"}, "text"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": ["text"]}, "input[0]"),
        ({"input": 3}, "input"),
    ],
)
def test_what_a_chat_server_cannot_honour_names_its_param(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_request({"model": "m", "input": "x", **fields}, stream=False)
    assert caught.value.param == param and caught.value.status == 400


def test_empty_values_of_refused_fields_are_fine() -> None:
    chat = chat_request(
        {"model": "m", "input": "x", "reasoning": {"effort": None}, "background": False, "include": []},
        stream=False,
    )
    assert chat["messages"] == [{"role": "user", "content": "x"}]
