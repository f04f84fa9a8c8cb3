"""``stop_reason`` over the in-memory engine twin: the stop string or stop token id that ended a choice,
as vLLM reports it beside ``finish_reason: "stop"`` (null when the reply ended by itself), on chat and
text completions, plain and streamed. The gateway's Anthropic adapter reads it to answer
``stop_reason: "stop_sequence"``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.backends.serving.fake_engine import MODEL, REPLY, FakeAsyncEngine
from tests.backends.serving.harness import chat, post

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def fake() -> FakeAsyncEngine:
    engine = FakeAsyncEngine(max_waiting=1)
    engine.engine.max_model_len = 4096  # one token a byte: a prompt with tools is longer than 512
    return engine


def stream_payloads(base_url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of a streamed request (the ``[DONE]`` line left out)."""
    with httpx.stream("POST", f"{base_url}{path}", json={**body, "stream": True}, timeout=20) as response:
        assert response.status_code == 200
        events = b"".join(response.iter_bytes()).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    return [json.loads(e[len(b"data: ") :]) for e in events[:-2]]


@pytest.mark.parametrize(
    ("fields", "text", "stop_reason"),
    [
        ({"stop": ["zz", "wörld"]}, "Hello, ", "wörld"),
        ({"stop_token_ids": [ord(",")]}, "Hello,", ord(",")),  # the id, as vLLM reports it
        ({}, REPLY, None),  # eos: no stop string or id ended it
    ],
)
def test_a_chat_choice_names_what_stopped_it(
    base_url: str, fields: dict[str, Any], text: str, stop_reason: str | int | None
) -> None:
    response = post(base_url, "/v1/chat/completions", chat(**fields))
    assert response.status_code == 200, response.text
    [choice] = response.json()["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == (text, "stop")
    assert "stop_reason" in choice and choice["stop_reason"] == stop_reason


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_a_chat_stream_names_the_stop_string_with_the_finish_reason(
    base_url: str, tools: list[dict[str, Any]] | None
) -> None:
    """Only the chunk that carries the finish reason has ``stop_reason``, as in vLLM's chat stream
    (a reply read for tool calls ends through its own chunk maker)."""
    body = chat(stop=["wörld"], **({"tools": tools} if tools else {}))
    payloads = stream_payloads(base_url, "/v1/chat/completions", body)
    choices = [p["choices"][0] for p in payloads]
    content = "".join(c["delta"].get("content", "") for c in choices)
    assert content.rstrip() == "Hello,"  # the tool-call reader trims the reply's trailing space
    assert (choices[-1]["finish_reason"], choices[-1]["stop_reason"]) == ("stop", "wörld")
    assert not any("stop_reason" in c for c in choices[:-1])


def test_a_chat_stream_cut_for_length_has_a_null_stop_reason(base_url: str) -> None:
    payloads = stream_payloads(base_url, "/v1/chat/completions", chat(stop=["wörld"], max_tokens=3))
    last = payloads[-1]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == ("length", None)


def test_a_completion_choice_names_the_stop_string(base_url: str) -> None:
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 40, "stop": "wörld"}
    [choice] = post(base_url, "/v1/completions", body).json()["choices"]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == ("Hello, ", "stop", "wörld")
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 40}
    [choice] = post(base_url, "/v1/completions", body).json()["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)


def test_a_completion_stream_names_the_stop_string_with_the_finish_reason(base_url: str) -> None:
    """Every chunk of a completion stream has the field (null while it runs), as vLLM's has."""
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 40, "stop_token_ids": [ord("!")]}
    choices = [p["choices"][0] for p in stream_payloads(base_url, "/v1/completions", body)]
    assert "".join(c["text"] for c in choices) == "Hello, wörld!"
    assert (choices[-1]["finish_reason"], choices[-1]["stop_reason"]) == ("stop", ord("!"))
    assert all(c["finish_reason"] is None and c["stop_reason"] is None for c in choices[:-1])
