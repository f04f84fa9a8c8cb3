"""llama.cpp's answers read back as OpenAI's: native answers and streams as text completions (split at
every byte, cut, with errors), the OpenAI mode's answers and streams with the request's model, and
error bodies as OpenAI envelopes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.adapters.base import Exchange
from gateway.errors import UpstreamProtocolError
from tests.gateway.adapters.llamacpp.wire import (
    CHAT_STREAM,
    EXCEEDS,
    MODEL,
    NATIVE_STREAM,
    completion_for,
    exchange_for,
    plain_answer,
)


def _events(stream: bytes) -> list[Any]:
    """The ``data:`` payloads of an SSE byte stream (``[DONE]`` as the string)."""
    out: list[Any] = []
    for block in stream.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        payload = block[6:]
        out.append("[DONE]" if payload == b"[DONE]" else msgspec.json.decode(payload))
    return out


def _without_identity(events: list[Any]) -> list[Any]:
    return [
        {k: v for k, v in e.items() if k not in ("id", "created")} if isinstance(e, dict) else e
        for e in events
    ]


def _feed_split(exchange: Exchange, native: bytes, cut: int) -> bytes:
    stream = exchange.translator.stream()
    return stream.feed(native[:cut]) + stream.feed(native[cut:]) + stream.end()


# -- plain answers -------------------------------------------------------------------------------


def test_a_plain_answer_bills_the_whole_prompt_the_cache_served_included() -> None:
    body = msgspec.json.decode(completion_for().translator.body(plain_answer()))
    assert body["object"] == "text_completion" and body["model"] == MODEL
    assert body["choices"] == [
        {
            "index": 0,
            "text": " the primary colours of the human eye: red,",
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 11, "total_tokens": 16}


@pytest.mark.parametrize(
    ("fields", "finish"),
    [
        ({"stop_type": "eos"}, "stop"),
        ({"stop_type": "word"}, "stop"),
        ({"stop_type": "limit"}, "length"),
        ({"stop_type": "none"}, "stop"),
        ({"stop_type": None, "stopped_limit": True, "stopped_eos": False}, "length"),
        ({"stop_type": None, "stopped_eos": True, "stopped_limit": False}, "stop"),
    ],
)
def test_finish_reasons(fields: dict[str, Any], finish: str) -> None:
    body = msgspec.json.decode(completion_for().translator.body(plain_answer(**fields)))
    assert body["choices"][0]["finish_reason"] == finish


def test_counts_fall_back_to_timings_with_the_cached_prompt_part() -> None:
    payload = plain_answer(tokens_evaluated=None, tokens_predicted=None)
    body = msgspec.json.decode(completion_for().translator.body(payload))
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 11, "total_tokens": 16}


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        plain_answer(content=7),
        plain_answer(tokens_evaluated=None, timings={"predicted_n": 3}),
    ],
)
def test_a_malformed_answer_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        completion_for().translator.body(payload)


# -- streams -------------------------------------------------------------------------------------


def test_a_stream_becomes_openai_chunks_ending_in_finish_usage_and_done() -> None:
    exchange = completion_for(stream=True)
    stream = exchange.translator.stream()
    events = _events(stream.feed(NATIVE_STREAM) + stream.end())
    texts = [e["choices"][0]["text"] for e in events[:-3]]
    assert "".join(texts) == " the primary colours of the"
    assert all(e["model"] == MODEL and e["object"] == "text_completion" for e in events[:-1])
    assert events[-3]["choices"] == [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]
    assert events[-2]["choices"] == [] and events[-2]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 5,
        "total_tokens": 10,
    }
    assert events[-1] == "[DONE]"


def test_a_stream_split_at_every_byte_reads_the_same() -> None:
    exchange = completion_for(stream=True)
    whole = _without_identity(_events(_feed_split(exchange, NATIVE_STREAM, len(NATIVE_STREAM))))
    for cut in range(len(NATIVE_STREAM)):
        assert _without_identity(_events(_feed_split(exchange, NATIVE_STREAM, cut))) == whole, cut


def test_pings_and_crlf_are_read_as_sse() -> None:
    native = b": ping\r\n\r\n" + NATIVE_STREAM.replace(b"\n", b"\r\n")
    stream = completion_for(stream=True).translator.stream()
    assert _events(stream.feed(native))[-1] == "[DONE]"


def test_a_cut_stream_stays_cut() -> None:
    stream = completion_for(stream=True).translator.stream()
    cut = NATIVE_STREAM[: NATIVE_STREAM.index(b'data: {"index":0,"content":" of"') + 20]
    events = _events(stream.feed(cut) + stream.end())
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None]


def test_an_error_mid_stream_is_an_openai_error_event() -> None:
    native = NATIVE_STREAM[: NATIVE_STREAM.index(b"\n\n") + 2] + (
        b'data: {"error":{"code":500,"message":"Input prompt is too big","type":"server_error"}}\n\n'
    )
    stream = completion_for(stream=True).translator.stream()
    events = _events(stream.feed(native) + stream.end())
    assert events[-1] == {
        "error": {
            "message": "Input prompt is too big",
            "type": "server_error",
            "param": None,
            "code": "server_error",
        }
    }


def test_a_malformed_event_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        completion_for(stream=True).translator.stream().feed(b"data: {nope\n\n")


# -- openai mode ---------------------------------------------------------------------------------


def test_openai_mode_answers_name_the_requests_model() -> None:
    answer = (
        b'{"choices":[{"finish_reason":"length","index":0,'
        b'"message":{"role":"assistant","content":"The sea"}}],"created":1796165062,"model":"SmolLM2.gguf",'
        b'"object":"chat.completion","usage":{"completion_tokens":2,'
        b'"prompt_tokens":37,"total_tokens":39},"id":"chatcmpl-OIUT"}'
    )
    body = msgspec.json.decode(exchange_for("/chat/completions", {}).translator.body(answer))
    expected = msgspec.json.decode(answer)
    expected["model"] = MODEL
    assert body == expected


def test_an_openai_mode_stream_passes_event_by_event_with_the_model_set() -> None:
    exchange = exchange_for("/chat/completions", {}, stream=True)
    expected = _events(CHAT_STREAM)
    for event in expected[:-1]:
        event["model"] = MODEL
    for cut in range(len(CHAT_STREAM)):
        assert _events(_feed_split(exchange, CHAT_STREAM, cut)) == expected, cut


def test_an_openai_mode_stream_cut_before_done_stays_cut() -> None:
    stream = exchange_for("/chat/completions", {}, stream=True).translator.stream()
    out = stream.feed(CHAT_STREAM[:-3]) + stream.end()
    assert "[DONE]" not in _events(out)


def test_an_openai_mode_error_event_is_normalised() -> None:
    stream = exchange_for("/chat/completions", {}, stream=True).translator.stream()
    out = stream.feed(b'data: {"error":{"code":400,"message":"bad","type":"invalid_request_error"}}\n\n')
    assert _events(out) == [
        {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        }
    ]


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/completions", "/chat/completions"])
def test_a_prompt_beyond_the_context_is_the_clients_400(path: str) -> None:
    exchange = exchange_for(path, {"prompt": "x"} if path == "/completions" else {})
    error = msgspec.json.decode(exchange.translator.error(400, EXCEEDS))["error"]
    assert error == {
        "message": "request (5001 tokens) exceeds the available context size (2048 tokens), "
        "try increasing it",
        "type": "invalid_request_error",
        "param": None,
        "code": "exceed_context_size_error",
    }


@pytest.mark.parametrize(
    ("status", "payload", "message", "code"),
    [
        (
            501,
            b'{"error":{"code":501,"message":"This server does not support embeddings. Start it with '
            b'`--embeddings`","type":"not_supported_error"}}',
            "This server does not support embeddings. Start it with `--embeddings`",
            "not_supported_error",
        ),
        (
            503,
            b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}',
            "Loading model",
            "unavailable_error",
        ),
        (404, b"File Not Found", "File Not Found", "upstream_status"),
        (400, b'{"error":"bad prompt"}', "bad prompt", "upstream_status"),
        (400, b"", "HTTP 400", "upstream_status"),
    ],
)
def test_every_error_body_is_an_openai_envelope(status: int, payload: bytes, message: str, code: str) -> None:
    error = msgspec.json.decode(completion_for().translator.error(status, payload))["error"]
    assert (error["message"], error["code"], error["param"]) == (message, code, None)
    assert error["type"] == (
        "server_error" if status >= 500 else "invalid_request_error" if status == 400 else "not_found_error"
    )
