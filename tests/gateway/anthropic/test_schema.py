"""The Messages request Structs: a body that does not fit is a 400 naming the field as Anthropic does
(``messages.0.content.1.type``), whole-number floats are integers, a role decides its blocks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.anthropic.schema import (
    AssistantMessage,
    CountTokensRequest,
    MessagesRequest,
    UserMessage,
    convert_request,
    parse_json,
)
from gateway.errors import InvalidJSON, InvalidRequest

BASE: dict[str, Any] = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}


def test_roles_and_whole_floats() -> None:
    document = parse_json(json.dumps({**BASE, "max_tokens": 8.0}).encode())
    request = convert_request(
        {**document, "messages": [*document["messages"], {"role": "assistant", "content": "y"}]},
        MessagesRequest,
    )
    assert request.max_tokens == 8 and isinstance(request.max_tokens, int)
    assert [type(m) for m in request.messages] == [UserMessage, AssistantMessage]


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"max_tokens": None}, "max_tokens", "Field required"),
        ({"max_tokens": "8"}, "max_tokens", "Expected `int`"),
        ({"extra": 1}, "extra", "Extra inputs are not permitted"),
        ({"messages": [{"role": "user"}]}, "messages.0.content", "Field required"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "tool_use"}]}
                ]
            },
            "messages.0.content.1.type",
            "Invalid value 'tool_use'",
        ),
        ({"system": [{"text": "no type"}]}, "system.0.type", "Field required"),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema", "Field required"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name", "Field required"),
        ({"temperature": 1.5}, "temperature", "Expected `float` <= 1"),
    ],
)
def test_a_body_that_does_not_fit_names_the_field(change: dict[str, Any], param: str, message: str) -> None:
    body = {**BASE, **change}
    with pytest.raises(InvalidRequest) as refused:
        convert_request({k: v for k, v in body.items() if v is not None}, MessagesRequest)
    assert refused.value.param == param
    assert refused.value.message.startswith(f"{param}: ") and message in refused.value.message


def test_count_tokens_needs_no_max_tokens() -> None:
    assert convert_request({"model": "m", "messages": BASE["messages"]}, CountTokensRequest).model == "m"
    with pytest.raises(InvalidRequest) as refused:
        convert_request(BASE, CountTokensRequest)
    assert refused.value.param == "max_tokens"


@pytest.mark.parametrize("raw", [b"", b"{", b"[" * 5000 + b"]" * 5000])
def test_what_is_not_json(raw: bytes) -> None:
    with pytest.raises(InvalidJSON):
        convert_request(parse_json(raw), MessagesRequest)
