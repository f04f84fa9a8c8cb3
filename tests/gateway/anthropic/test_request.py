"""A Messages request becomes the chat completions request it means; what no chat server can honour is
a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.anthropic.request import to_chat
from gateway.errors import InvalidJSON, InvalidRequest

BASE = {"model": "claude-sonnet-4-5", "max_tokens": 64}


def chat(**fields: Any) -> dict[str, Any]:
    return to_chat(json.dumps({**BASE, **fields}).encode())


def test_text_turns_system_and_sampling() -> None:
    body = chat(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
            {"role": "user", "content": [{"type": "text", "text": "Bye"}]},
        ],
        temperature=0.2,
        top_p=0.9,
        top_k=5,
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
    )
    assert body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": "Be brief.\n\nBe kind."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Bye"},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 5,
        "stop": ["END"],
        "user": "u-1",
    }


def test_a_tool_use_loop() -> None:
    body = chat(
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "22C"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        tools=[{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "22C"}
    assert body["messages"][3] == {"role": "user", "content": "And tomorrow?"}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object"}, "description": "Weather."},
        }
    ]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ],
)
def test_tool_choices(choice: dict[str, Any], expected: Any) -> None:
    assert chat(messages=[{"role": "user", "content": "x"}], tool_choice=choice)["tool_choice"] == expected


def test_images_and_errors_in_tool_results() -> None:
    body = chat(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
                    {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True},
                    {"type": "text", "text": "What is this?"},
                ],
            }
        ]
    )
    assert body["messages"] == [
        {"role": "tool", "tool_call_id": "t", "content": "Error: boom"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                {"type": "text", "text": "What is this?"},
            ],
        },
    ]


def test_a_stream_asks_for_the_usage_chunk() -> None:
    body = chat(messages=[{"role": "user", "content": "x"}], stream=True)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"model": ""}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": [{"type": "document"}]}]}, "messages.0.content.0.type"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
        ({"tools": [{"name": "get weather", "input_schema": {}}]}, "tools.0.name"),
        ({"tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools.0.input_schema.type"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"mcp_servers": [{"url": "http://x"}]}, "mcp_servers"),
        ({"stop_sequences": [""]}, "stop_sequences.0"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], param: str) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], **fields}
    with pytest.raises(InvalidRequest) as refused:
        chat(**body)
    assert refused.value.param == param and refused.value.status == 400


def test_not_json_or_not_an_object() -> None:
    with pytest.raises(InvalidJSON):
        to_chat(b"{nope")
    with pytest.raises(InvalidRequest):
        to_chat(b"[1]")


def test_structured_outputs() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = chat(
        messages=[{"role": "user", "content": "x"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    with pytest.raises(InvalidRequest) as refused:
        chat(messages=[{"role": "user", "content": "x"}], output_config={"effort": "high"})
    assert refused.value.param == "output_config.effort"


def test_thinking_disabled_and_service_tier_pass() -> None:
    body = chat(
        messages=[{"role": "user", "content": "x"}], thinking={"type": "disabled"}, service_tier="auto"
    )
    assert "thinking" not in body and "service_tier" not in body
