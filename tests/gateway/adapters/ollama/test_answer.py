"""Ollama's answers read back as OpenAI's: plain answers, NDJSON streams (split at every byte), errors
and embeddings.

Native answers are the recorded wire's (``tests/backends_compat/wire/ollama.json``) where it has them.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import msgspec
import pytest

from gateway.adapters import Exchange
from gateway.adapters.shapes import sse_data
from gateway.errors import UpstreamProtocolError
from gateway.sse import SSERelay, read_body_usage
from tests.gateway.adapters.ollama.wire import MODEL, chat_for, exchange_for, recorded, recorded_response


def _events(sse: bytes) -> list[Any]:
    """The SSE payloads, JSON read (``[DONE]`` as the string), ids and timestamps left out."""
    events: list[Any] = []
    for block in sse.split(b"\n\n")[:-1]:
        payload = sse_data(block)
        assert payload is not None, block
        if payload == b"[DONE]":
            events.append("[DONE]")
            continue
        event = json.loads(payload)
        event.pop("id", None)
        event.pop("created", None)
        events.append(event)
    return events


def _stream(exchange: Exchange, chunks: list[bytes]) -> bytes:
    translator = exchange.translator.stream()
    return b"".join(translator.feed(chunk) for chunk in chunks) + translator.end()


# ---- plain answers ----


def test_a_chat_answer_reads_as_an_openai_completion_with_usage() -> None:
    answer = json.loads(chat_for(max_tokens=16).translator.body(recorded("chat")))
    assert answer["object"] == "chat.completion" and answer["model"] == MODEL
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The sea is a vast, restless world of endless blue."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert answer["usage"] == {"prompt_tokens": 36, "completion_tokens": 12, "total_tokens": 48}
    usage, reasons = read_body_usage(json.dumps(answer).encode())
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (36, 12)
    assert reasons == ["stop"]


def test_done_reason_length_is_length() -> None:
    answer = json.loads(chat_for(max_tokens=5).translator.body(recorded("chat_max_tokens_5")))
    assert answer["choices"][0]["message"]["content"] == "The sea is a vast"
    assert answer["choices"][0]["finish_reason"] == "length" and answer["usage"]["completion_tokens"] == 5


def test_a_completion_answer_reads_response() -> None:
    exchange = exchange_for("/completions", prompt="The three primary colours are")
    answer = json.loads(exchange.translator.body(recorded("generate_raw")))
    assert answer["object"] == "text_completion"
    assert (
        answer["choices"][0]["text"]
        == " red, yellow and blue. These three colours cannot be made by mixing other colours"
    )
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 6, "completion_tokens": 16, "total_tokens": 22}


def test_missing_counts_are_zero_and_a_missing_done_reason_is_read_from_the_counts() -> None:
    old = {
        "model": MODEL,
        "created_at": "2024-05-01T10:00:00Z",
        "message": {"role": "assistant", "content": "Hi"},
    }
    at_limit = json.loads(
        chat_for(max_tokens=4).translator.body(json.dumps({**old, "done": True, "eval_count": 4}).encode())
    )
    assert at_limit["choices"][0]["finish_reason"] == "length"
    assert at_limit["usage"] == {
        "prompt_tokens": 0,
        "completion_tokens": 4,
        "total_tokens": 4,
    }  # prompt cached
    under = json.loads(
        chat_for(max_tokens=8).translator.body(json.dumps({**old, "done": True, "eval_count": 4}).encode())
    )
    assert under["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        b'{"message": {"role": "assistant", "content": 3}, "done": true}',
        b'{"message": {"role": "assistant", "content": "Hi"}, "done": false}',
        b'{"error": "model runner has unexpectedly stopped"}',
    ],
)
def test_a_malformed_answer_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        chat_for().translator.body(payload)


# ---- streams ----


def _chat_stream_wire() -> list[bytes]:
    return [chunk.encode() for chunk in recorded_response("chat_stream")["chunks"]]


def test_a_stream_reads_as_openai_chunks_then_usage_and_done() -> None:
    events = _events(_stream(chat_for(True, max_tokens=16), _chat_stream_wire()))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": "The"}
    texts = [e["choices"][0]["delta"].get("content", "") for e in events[:-2]]
    assert "".join(texts) == "The sea is a vast, restless world of endless blue."
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == MODEL for e in events[:-1])
    assert events[-3]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]
    assert events[-2]["choices"] == [] and events[-2]["usage"] == {
        "prompt_tokens": 36,
        "completion_tokens": 12,
        "total_tokens": 48,
    }
    assert events[-1] == "[DONE]"


def test_a_stream_split_at_every_byte_reads_the_same() -> None:
    wire = b"".join(_chat_stream_wire())
    whole = _events(_stream(chat_for(True, max_tokens=16), [wire]))
    for cut in range(1, len(wire)):
        assert _events(_stream(chat_for(True, max_tokens=16), [wire[:cut], wire[cut:]])) == whole, cut
    assert _events(_stream(chat_for(True, max_tokens=16), [bytes([b]) for b in wire])) == whole


def test_the_relay_reads_usage_and_finish_from_the_translated_stream() -> None:
    relay = SSERelay((), drop_usage_chunk=True)
    out = relay.feed(_stream(chat_for(True, max_tokens=16), _chat_stream_wire()))
    assert relay.is_done and relay.failure is None and relay.finish_reasons == ["stop"]
    assert relay.usage is not None and (relay.usage.input_tokens, relay.usage.output_tokens) == (36, 12)
    assert b'"usage"' not in out  # the client did not ask for it


def test_the_done_object_may_carry_the_last_text() -> None:
    wire = [
        b'{"model":"llama3.2:1b","created_at":"2025-10-26T17:15:24.155176Z","response":"That\'s","done":false}\n',
        b'{"model":"llama3.2:1b","created_at":"2025-10-26T17:15:24.166576Z","response":" it!","done":true,'
        b'"done_reason":"stop","prompt_eval_count":9,"eval_count":3}\n',
    ]
    events = _events(_stream(exchange_for("/completions", True, prompt="So"), wire))
    assert [e["choices"][0]["text"] for e in events[:-2]] == ["That's", " it!", ""]
    assert (
        events[-3]["choices"][0]["finish_reason"] == "stop" and events[-2]["usage"]["completion_tokens"] == 3
    )


def test_a_done_object_without_its_newline_still_ends_the_stream() -> None:
    wire = _chat_stream_wire()
    wire[-1] = wire[-1].rstrip(b"\n")
    events = _events(_stream(chat_for(True, max_tokens=16), wire))
    assert events[-1] == "[DONE]" and events[-3]["choices"][0]["finish_reason"] == "stop"


def test_a_cut_stream_ends_without_a_finish() -> None:
    exchange = chat_for(True, max_tokens=200)
    translator = exchange.translator.stream()
    wire = "".join(recorded_response("chat_stream_cut")["chunks"]).encode() + b'{"model":"llama3.2:1b","crea'
    out = translator.feed(wire)
    assert translator.end() == b""
    events = _events(out)
    assert (
        "".join(e["choices"][0]["delta"]["content"] for e in events) == "Once upon a time, on a rocky island"
    )
    assert all(e["choices"][0]["finish_reason"] is None for e in events)


def test_an_error_line_mid_stream_becomes_an_error_event_and_ends_it() -> None:
    wire = [
        b'{"model":"llama3.2:1b","created_at":"2025-10-26T17:21:21.19624Z","response":" Yes","done":false}\n',
        b'{"error":"an error was encountered while running the model"}\n',
        b'{"model":"llama3.2:1b","created_at":"2025-10-26T17:21:21.207235Z","response":".","done":false}\n',
    ]
    translator = exchange_for("/completions", True, prompt="Is it?").translator.stream()
    events = _events(b"".join(translator.feed(chunk) for chunk in wire))
    assert translator.end() == b""
    assert [e.get("choices", [{}])[0].get("text") for e in events] == [" Yes", None]
    assert events[1]["error"] == {
        "message": "an error was encountered while running the model",
        "type": "server_error",
        "param": None,
        "code": "upstream_error",
    }


def test_a_malformed_stream_line_is_a_protocol_error() -> None:
    translator = chat_for(True).translator.stream()
    with pytest.raises(UpstreamProtocolError):
        translator.feed(b"<html>502 Bad Gateway</html>\n")


def test_the_transcript_is_valid_json_lines() -> None:
    for line in _chat_stream_wire():
        assert line.endswith(b"\n") and msgspec.json.decode(line)["model"] == MODEL


# ---- errors ----


def test_ollamas_errors_become_openai_envelopes() -> None:
    translator = chat_for().translator
    missing = json.loads(translator.error(404, recorded("chat_model_not_found")))["error"]
    assert missing == {
        "message": "model 'llama3.2:missing' not found",
        "type": "not_found_error",
        "param": None,
        "code": "model_not_found",
    }
    refused = json.loads(translator.error(400, recorded("chat_think_refused")))["error"]
    assert refused["message"] == '"llama3.2:1b" does not support thinking'
    assert refused["type"] == "invalid_request_error" and refused["code"] == "upstream_status"
    text = json.loads(translator.error(404, b"404 page not found"))["error"]  # gin's own: not a model
    assert text["message"] == "404 page not found" and text["code"] == "upstream_status"
    assert json.loads(translator.error(500, b""))["error"]["message"] == "Ollama answered HTTP 500."
    assert (
        json.loads(translator.error(429, b'{"error":"server busy"}'))["error"]["type"] == "rate_limit_error"
    )


# ---- embeddings ----


def _embedded() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(recorded("embed"))
    return document


def test_embeddings_read_as_the_openai_list_with_usage() -> None:
    exchange = exchange_for(
        "/embeddings", input=["Why is the sky blue?", "Why is the grass green?"], encoding_format="float"
    )
    answer = json.loads(exchange.translator.body(recorded("embed")))
    vectors = _embedded()["embeddings"]
    assert answer["object"] == "list" and answer["model"] == MODEL
    assert answer["data"] == [
        {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
    ]
    assert answer["usage"] == {"prompt_tokens": 16, "total_tokens": 16}
    usage, _ = read_body_usage(exchange.translator.body(recorded("embed")))
    assert usage is not None and usage.input_tokens == 16


def test_base64_embeddings_are_little_endian_float32() -> None:
    exchange = exchange_for("/embeddings", input=["a", "b"], encoding_format="base64")
    answer = json.loads(exchange.translator.body(recorded("embed")))
    for item, vector in zip(answer["data"], _embedded()["embeddings"], strict=True):
        raw = base64.b64decode(item["embedding"])
        assert list(struct.unpack(f"<{len(vector)}f", raw)) == [
            struct.unpack("<f", struct.pack("<f", x))[0] for x in vector
        ]


@pytest.mark.parametrize("payload", [b"nope", b'{"embeddings": [["a"]]}', b'{"model": "all-minilm"}'])
def test_malformed_embeddings_are_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        exchange_for("/embeddings", input="a").translator.body(payload)


def test_embeddings_are_never_streamed() -> None:
    with pytest.raises(UpstreamProtocolError):
        exchange_for("/embeddings", input="a").translator.stream()
