"""TGI's errors as OpenAI's: error bodies as envelopes, error events in a stream as OpenAI error events,
and a folded answer's error raised with the status its type has."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import UpstreamError, UpstreamStatusError
from tests.gateway.adapters.tgi.wire import (
    LENGTH_STREAM,
    MESSAGES,
    chat_chunk,
    exchange_for,
    feed_whole,
    openai_events,
    sse,
    token_event,
)


def test_an_error_event_in_a_completion_stream_is_openais_and_ends_it() -> None:
    exchange = exchange_for("/completions", {"prompt": "The sky is"}, stream=True)
    error = sse({"error": "Request failed during generation: CUDA out of memory", "error_type": "generation"})
    out, tail = feed_whole(exchange, [LENGTH_STREAM[0], error, LENGTH_STREAM[1]])
    events = openai_events(out)
    assert events[-1] == {
        "error": {
            "message": "Request failed during generation: CUDA out of memory",
            "type": "server_error",
            "param": None,
            "code": "generation",
        }
    }
    assert tail == b"" and len(events) == 2


def test_an_error_event_in_a_folded_answer_keeps_its_status() -> None:
    translator = exchange_for("/completions", {"prompt": "x"}).translator
    validation = sse(
        {"error": "Input validation error: `top_p` must be > 0.0 and < 1.0", "error_type": "validation"}
    )
    with pytest.raises(UpstreamStatusError) as caught:
        translator.body(validation)
    assert caught.value.upstream_status == 422
    assert json.loads(caught.value.upstream_body)["error"] == {
        "message": "Input validation error: `top_p` must be > 0.0 and < 1.0",
        "type": "invalid_request_error",
        "param": None,
        "code": "validation",
    }
    with pytest.raises(UpstreamStatusError) as overloaded:
        translator.body(sse({"error": "Model is overloaded", "error_type": "overloaded"}))
    assert overloaded.value.upstream_status == 429
    with pytest.raises(UpstreamError) as failed:
        translator.body(
            token_event(1, " a")
            + sse({"error": "Incomplete generation", "error_type": "incomplete_generation"})
        )
    assert not isinstance(failed.value, UpstreamStatusError)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"error": "Input validation error: `inputs` cannot be empty", "error_type": "validation"},
            {
                "message": "Input validation error: `inputs` cannot be empty",
                "type": "invalid_request_error",
                "param": None,
                "code": "validation",
            },
        ),
        (  # TGI 3 streams its errors in this shape
            {"error": {"message": "Request failed during generation: boom", "http_status_code": 422}},
            {
                "message": "Request failed during generation: boom",
                "type": "invalid_request_error",
                "param": None,
                "code": "upstream_status",
            },
        ),
    ],
)
def test_an_error_event_in_a_chat_stream_is_openais(event: dict[str, Any], expected: dict[str, Any]) -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES}, stream=True)
    out, tail = feed_whole(exchange, [sse(chat_chunk("The")), sse(event), b"data:[DONE]\n\n"])
    events = out.split(b"\n\n")[:-1]
    assert json.loads(events[1][6:]) == {"error": expected}
    assert events[2] == b"data:[DONE]" and tail == b""


@pytest.mark.parametrize(
    ("status", "body", "kind", "code"),
    [
        (
            422,
            {
                "error": "Input validation error: `top_n_tokens` must be >= 0 and <= 5. Given: 10",
                "error_type": "validation",
            },
            "invalid_request_error",
            "validation",
        ),
        (
            422,
            {"error": "Template error: syntax error", "error_type": "template_error"},
            "invalid_request_error",
            "template_error",
        ),
        (
            424,
            {"error": "Request failed during generation: boom", "error_type": "generation"},
            "server_error",
            "generation",
        ),
        (429, {"error": "Model is overloaded", "error_type": "overloaded"}, "rate_limit_error", "overloaded"),
        (
            500,
            {"error": "Incomplete generation", "error_type": "incomplete_generation"},
            "server_error",
            "incomplete_generation",
        ),
    ],
)
def test_tgi_error_bodies_become_openai_envelopes(
    status: int, body: dict[str, str], kind: str, code: str
) -> None:
    for path in ("/completions", "/chat/completions"):
        translator = exchange_for(
            path, {"prompt": "x", "messages": MESSAGES} if path == "/chat/completions" else {"prompt": "x"}
        ).translator
        error = json.loads(translator.error(status, json.dumps(body).encode()))["error"]
        assert error == {"message": body["error"], "type": kind, "param": None, "code": code}


def test_a_plain_text_error_body_is_the_message() -> None:
    translator = exchange_for("/chat/completions", {"messages": MESSAGES}).translator
    payload = b"Failed to deserialize the JSON body into the target type: messages: missing field `messages`"
    error = json.loads(translator.error(422, payload))["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "upstream_status"
    assert payload.decode() in error["message"]
    assert json.loads(translator.error(400, b""))["error"]["message"] == "HTTP 400"
