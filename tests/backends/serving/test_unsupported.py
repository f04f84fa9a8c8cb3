"""Fields of features the engine does not serve yet are refused (400 ``unsupported_parameter``), never
silently dropped; their no-op values, and other unknown fields, are accepted."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.backends.serving.fake_engine import MODEL
from tests.backends.serving.harness import assert_error, chat, post

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
# tool calling is served: tests/backends/serving/test_tool_calls.py (legacy ``functions`` refused there);
# so are structured outputs: tests/backends/serving/test_structured_outputs.py
CHAT_REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("modalities", {"modalities": ["text", "audio"]}),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}),
    ("reasoning_effort", {"reasoning_effort": "high"}),
    ("verbosity", {"verbosity": "low"}),
    ("web_search_options", {"web_search_options": {}}),
    ("moderation", {"moderation": {"model": "omni-moderation-latest"}}),
]
CHAT_ACCEPTED: list[dict[str, Any]] = [
    {"tools": []},
    {"tools": None},
    {"tool_choice": "none"},
    {"tool_choice": None},
    {"tools": [TOOL], "tool_choice": "none"},
    {"response_format": {"type": "text"}},
    {"response_format": None},
    {"modalities": ["text"]},
    {"audio": None, "guided_json": None, "structured_outputs": None},
    {"some_future_openai_field": {"x": 1}},
    {"reasoning_effort": None, "verbosity": None, "web_search_options": None, "moderation": None},
    {"prediction": {"type": "content", "content": "Hello"}},  # a latency hint: the output is the same
]
TEXT_ACCEPTED: list[dict[str, Any]] = [
    {"response_format": {"type": "text"}},
    {"guided_regex": None},
    {"some_future_openai_field": 1},
    {"tools": [TOOL]},  # no such field on text completions: unknown, ignored
]


@pytest.mark.parametrize(("param", "fields"), CHAT_REFUSED, ids=lambda v: str(v)[:40])
def test_chat_refuses_what_it_does_not_serve(base_url: str, param: str, fields: dict[str, Any]) -> None:
    for stream in (False, True):
        response = post(base_url, CHAT, chat(stream=stream, **fields))
        assert_error(response, 400, "unsupported_parameter", param)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "does not support" in error["message"]  # names the field and says why


@pytest.mark.parametrize("fields", CHAT_ACCEPTED, ids=lambda v: str(v)[:40])
def test_chat_accepts_the_no_op_values(base_url: str, fields: dict[str, Any]) -> None:
    response = post(base_url, CHAT, chat(max_tokens=2, **fields))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("fields", TEXT_ACCEPTED, ids=lambda v: str(v)[:40])
def test_completions_accept_the_no_op_values(base_url: str, fields: dict[str, Any]) -> None:
    response = post(base_url, TEXT, {"model": MODEL, "prompt": "hi", "max_tokens": 2, **fields})
    assert response.status_code == 200, response.text


def test_the_sdk_sees_a_bad_request_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], modalities=["text", "audio"]
        )
    assert (info.value.code, info.value.param) == ("unsupported_parameter", "modalities")
