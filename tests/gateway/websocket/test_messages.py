"""gateway/websocket/messages.py: what a client's message becomes, and what is refused (with its id)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.websocket.messages import ClientMessage, Kind, MessageError, Mode, mode_of_query, read_message


def _read(document: Any, default_mode: str = "tokens") -> ClientMessage:
    return read_message(json.dumps(document), default_mode)


def _refused(data: str | bytes) -> MessageError:
    with pytest.raises(MessageError) as info:
        read_message(data)
    return info.value


def test_a_prompt_becomes_one_user_message_of_a_streamed_chat() -> None:
    message = _read({"id": "a", "model": "small", "prompt": "hi", "max_tokens": 5, "stream": False})
    assert (message.kind, message.id, message.mode, message.api_key) == (Kind.REQUEST, "a", Mode.TOKENS, None)
    assert msgspec.json.decode(message.body) == {
        "model": "small",
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_messages_and_every_other_field_pass_through_without_the_sockets_own() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    message = _read(
        {
            "id": 7,
            "mode": "openai",
            "api_key": "sk-x",
            "model": "m",
            "messages": messages,
            "tools": [],
            "x": 1,
        }
    )
    assert (message.id, message.mode, message.api_key) == (7, Mode.OPENAI, "sk-x")
    assert msgspec.json.decode(message.body) == {
        "model": "m",
        "messages": messages,
        "tools": [],
        "x": 1,
        "stream": True,
    }


def test_the_connections_mode_is_the_default_and_bytes_are_read_too() -> None:
    assert read_message(b'{"model": "m", "prompt": ""}', "openai").mode is Mode.OPENAI
    assert _read({"model": "m", "prompt": "", "mode": "tokens"}, "openai").mode is Mode.TOKENS


def test_auth_and_cancel_messages() -> None:
    assert _read({"type": "auth", "api_key": "sk-x"}) == ClientMessage(Kind.AUTH, None, Mode.TOKENS, "sk-x")
    assert _read({"type": "cancel", "id": "a"}) == ClientMessage(Kind.CANCEL, "a", Mode.TOKENS)
    refused = _refused(json.dumps({"type": "cancel"}))
    assert refused.error.param == "id" and refused.error.code == "missing_required_parameter"


@pytest.mark.parametrize(
    ("data", "code", "param"),
    [
        ("{not json", "invalid_json", None),
        ("[" * 5000 + "]" * 5000, "invalid_json", None),
        ('["model"]', "invalid_type", None),
        ('{"id": {"a": 1}, "model": "m", "prompt": "x"}', "invalid_type", "id"),
        ('{"id": true, "model": "m", "prompt": "x"}', "invalid_type", "id"),
        ('{"id": "' + "x" * 129 + '", "model": "m", "prompt": "x"}', "invalid_type", "id"),
    ],
)
def test_unreadable_messages_are_refused_without_an_id(data: str, code: str, param: str | None) -> None:
    refused = _refused(data)
    assert (refused.id, refused.error.code, refused.error.param) == (None, code, param)
    assert refused.error.status == 400


@pytest.mark.parametrize(
    ("document", "code", "param"),
    [
        ({"type": "hello"}, "invalid_value", "type"),
        ({"mode": "sse", "prompt": "x"}, "invalid_value", "mode"),
        ({"mode": 1, "prompt": "x"}, "invalid_value", "mode"),
        ({"api_key": 42, "prompt": "x"}, "invalid_type", "api_key"),
        ({"prompt": "x", "messages": []}, "invalid_value", "prompt"),
        ({"prompt": ["x"]}, "invalid_type", "prompt"),
        ({"model": "m"}, "missing_required_parameter", "prompt"),
    ],
)
def test_refusals_of_a_readable_message_echo_its_id(document: dict[str, Any], code: str, param: str) -> None:
    refused = _refused(json.dumps({"id": "r", **document}))
    assert (refused.id, refused.error.code, refused.error.param) == ("r", code, param)


def test_the_connections_mode_comes_from_its_query_string() -> None:
    assert mode_of_query(b"") == "tokens"
    assert mode_of_query(b"x=1&mode=openai") == "openai"
    assert mode_of_query(b"mode=sse") == "sse"  # refused with each request (param "mode")
