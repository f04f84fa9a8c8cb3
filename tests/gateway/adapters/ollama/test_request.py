"""Ollama requests: sampling in ``options`` with OpenAI's defaults, formats, thinking, messages and
images, and what Ollama cannot honour refused naming the parameter."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gateway.errors import InvalidRequest
from tests.gateway.adapters.ollama.wire import MODEL, SEA, chat_for, exchange_for, sent_body


def test_sampling_goes_into_options_and_openai_defaults_replace_the_modelfiles() -> None:
    sent = sent_body(
        chat_for(
            max_completion_tokens=40,
            max_tokens=99,
            temperature=0.7,
            top_p=0.5,
            seed=7,
            stop="\n\n",
            frequency_penalty=0.5,
            presence_penalty=-0.5,
            top_k=20,
            min_p=0.05,
            repetition_penalty=1.1,
        )
    )
    assert sent["options"] == {
        "temperature": 0.7,
        "top_p": 0.5,
        "seed": 7,
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "top_k": 20,
        "min_p": 0.05,
        "repeat_penalty": 1.1,
        "stop": ["\n\n"],
        "num_predict": 40,  # max_completion_tokens wins over the deprecated max_tokens
    }
    assert sent_body(chat_for())["options"] == {"temperature": 1.0, "top_p": 1.0}  # no num_predict: no limit
    assert sent_body(chat_for(stop=[" is", "."]))["options"]["stop"] == [" is", "."]
    assert "stop" not in sent_body(chat_for(stop=[]))["options"]


def test_fields_with_no_effect_on_the_output_are_dropped_and_nulls_mean_defaults() -> None:
    sent = sent_body(
        chat_for(
            True,
            user="u-1",
            metadata={"k": "v"},
            store=False,
            service_tier="auto",
            priority=3,
            cache_salt="s",
            stream_options={"include_usage": True},
            parallel_tool_calls=False,
            logprobs=False,
            top_logprobs=None,
            n=1,
            tool_choice="none",
            response_format=None,
            seed=None,
        )
    )
    assert sent == {
        "model": MODEL,
        "messages": SEA,
        "stream": True,
        "options": {"temperature": 1.0, "top_p": 1.0},
    }


def test_response_format_becomes_format() -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert sent_body(chat_for(response_format={"type": "json_object"}))["format"] == "json"
    json_schema = {"type": "json_schema", "json_schema": {"name": "age", "schema": schema, "strict": True}}
    assert sent_body(chat_for(response_format=json_schema))["format"] == schema
    assert "format" not in sent_body(chat_for(response_format={"type": "text"}))


def test_reasoning_effort_becomes_think() -> None:
    assert sent_body(chat_for(reasoning_effort="none"))["think"] is False
    for level in ("low", "medium", "high"):
        assert sent_body(chat_for(reasoning_effort=level))["think"] == level
    assert "think" not in sent_body(chat_for())


def test_messages_map_roles_text_parts_and_data_url_images() -> None:
    png = base64.b64encode(b"\x89PNG...").decode()
    messages = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "name": "ann",
            "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "this?"}],
        },
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}],
        },
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
    ]
    assert sent_body(chat_for(messages=messages))["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is this?"},
        {"role": "user", "content": "", "images": [png]},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "I can't."},
    ]


IMAGE_AT = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", {"n": 2}, "n"),
        ("/chat/completions", {"logprobs": True}, "logprobs"),
        ("/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
        ("/chat/completions", {"logit_bias": {"50256": -100}}, "logit_bias"),
        ("/chat/completions", {"tools": [TOOL]}, "tools"),
        ("/chat/completions", {"tool_choice": "required"}, "tool_choice"),
        ("/chat/completions", {"guided_json": {"type": "object"}}, "guided_json"),
        ("/chat/completions", {"audio": {"voice": "alloy"}}, "audio"),
        ("/chat/completions", {"response_format": {"type": "grammar"}}, "response_format"),
        (
            "/chat/completions",
            {"response_format": {"type": "json_schema"}},
            "response_format.json_schema.schema",
        ),
        ("/chat/completions", {"reasoning_effort": "minimal"}, "reasoning_effort"),
        ("/chat/completions", {"stop": 3}, "stop"),
        ("/chat/completions", {"messages": []}, "messages"),
        ("/chat/completions", {"messages": ["hi"]}, "messages[0]"),
        ("/chat/completions", {"messages": [{"content": "hi"}]}, "messages[0].role"),
        ("/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages[0]"),
        (
            "/chat/completions",
            {"messages": [{"role": "tool", "content": "4", "tool_call_id": "c1"}]},
            "messages[0]",
        ),
        (
            "/chat/completions",
            {"messages": [*SEA, {"role": "assistant", "tool_calls": [CALL]}]},
            "messages[1]",
        ),
        (
            "/chat/completions",
            {"messages": [{"role": "user", "content": [IMAGE_AT]}]},
            "messages[0].content[0]",
        ),
        ("/chat/completions", {"messages": [{"role": "user", "content": [AUDIO]}]}, "messages[0].content[0]"),
        ("/completions", {"prompt": ["one", "two"]}, "prompt"),
        ("/completions", {"prompt": [1, 2, 3]}, "prompt"),
        ("/completions", {"prompt": "a", "n": 3}, "n"),
        ("/completions", {"prompt": "a", "best_of": 2}, "best_of"),
        ("/completions", {"prompt": "a", "logprobs": 0}, "logprobs"),
        ("/completions", {"prompt": "a", "echo": True}, "echo"),
        ("/completions", {"prompt": "def f():", "suffix": "    return x"}, "suffix"),
        ("/completions", {"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ("/embeddings", {"input": [[1, 2, 3]]}, "input"),
        ("/embeddings", {"input": "a", "truncate": True}, "truncate"),
    ],
)
def test_what_ollama_cannot_honour_is_refused_naming_the_param(
    path: str, body: dict[str, Any], param: str
) -> None:
    if path == "/chat/completions":
        body = {"messages": SEA, **body}
    with pytest.raises(InvalidRequest) as caught:
        exchange_for(path, **body)
    assert caught.value.status == 400 and caught.value.param == param
    assert caught.value.message
