"""Triton's answers read back as OpenAI's: the generate answer with its counted or estimated usage, the
stop word cut, errors as envelopes, and the SSE stream (split at every byte, cut, failed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.adapters.base import Exchange
from gateway.adapters.shapes import DONE
from gateway.errors import UpstreamProtocolError
from tests.gateway.adapters.triton.wire import CHATML, chat_for, exchange_for
from tests.support.wire_fake import load_transcript


def _answer(text: str, n_in: int | None = 19, n_out: int | None = 15, **more: Any) -> bytes:
    document: dict[str, Any] = {"model_name": "ensemble", "model_version": "1", "text_output": text, **more}
    if n_in is not None:
        document["num_input_tokens"] = n_in
    if n_out is not None:
        document["num_output_tokens"] = n_out
    return json.dumps(document).encode()


def _event(text: str, n_in: int | None = 19, n_out: int | None = 1) -> bytes:
    return b"data: " + _answer(text, n_in, n_out) + b"\n\n"


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.split(b"\n\n"):
        if block:
            assert block.startswith(b"data: ")
            payload = block[6:]
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def _stream(exchange: Exchange, chunks: list[bytes]) -> tuple[bytes, bytes]:
    translator = exchange.translator.stream()
    return b"".join(translator.feed(chunk) for chunk in chunks), translator.end()


def _texts(events: list[Any]) -> str:
    out = []
    for event in events:
        if isinstance(event, dict):
            for choice in event.get("choices", []):
                out.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(out)


def _without_identity(events: list[Any]) -> list[Any]:
    return [
        {k: v for k, v in e.items() if k not in ("id", "created")} if isinstance(e, dict) else e
        for e in events
    ]


PIECES = ["The", " sea", " is", " a", " vast", " expanse", " of", " blue", " water", "."]


# --- the answer --------------------------------------------------------------------------------------


def test_an_answer_is_an_openai_chat_completion_with_the_counted_usage() -> None:
    body = json.loads(chat_for(max_tokens=16).translator.body(_answer("The sea is a vast expanse.", 19, 7)))
    assert body["object"] == "chat.completion" and body["model"] == "ensemble"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "The sea is a vast expanse."}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 19, "completion_tokens": 7, "total_tokens": 26}


def test_output_tokens_reaching_max_tokens_is_length() -> None:
    body = json.loads(chat_for(max_tokens=5).translator.body(_answer("The sea is a vast", 19, 5)))
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 5
    completion = exchange_for("/completions", {"prompt": "The three primary colours are"})
    text = json.loads(completion.translator.body(_answer(" red, yellow and blue.", 6, 16)))
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == " red, yellow and blue."
    assert text["choices"][0]["finish_reason"] == "length"


def test_the_stop_word_tensorrt_llm_returns_is_cut_and_the_finish_is_stop() -> None:
    exchange = chat_for(max_tokens=3, stop=[" is"])
    body = json.loads(exchange.translator.body(_answer("The sea is", 19, 3)))
    assert body["choices"][0]["message"]["content"] == "The sea"
    assert body["choices"][0]["finish_reason"] == "stop"  # although 3 tokens reached max_tokens
    past = json.loads(exchange.translator.body(_answer("The sea is blue", 19, 3)))
    assert past["choices"][0]["message"]["content"] == "The sea"


def test_missing_counts_are_estimated_and_one_element_lists_are_read() -> None:
    body = json.loads(chat_for(max_tokens=100).translator.body(_answer("The sea is vast.", None, None)))
    assert body["usage"] == {
        "prompt_tokens": -(-len(CHATML) // 4),
        "completion_tokens": 4,  # 16 characters
        "total_tokens": -(-len(CHATML) // 4) + 4,
    }
    listed = chat_for(max_tokens=100).translator.body(
        json.dumps({"text_output": ["Hi"], "num_input_tokens": [[19]], "num_output_tokens": [1]}).encode()
    )
    assert json.loads(listed)["usage"]["prompt_tokens"] == 19


@pytest.mark.parametrize(
    "payload",
    [
        b"<html>oops</html>",
        b"[1, 2]",
        b'{"model_name": "ensemble"}',
        b'{"text_output": 5}',
        b'{"text_output": "x", "num_output_tokens": "many"}',
        b'{"text_output": "x", "num_output_tokens": -1}',
    ],
)
def test_a_malformed_answer_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        chat_for(max_tokens=8).translator.body(payload)


@pytest.mark.parametrize(
    ("status", "kind"), [(400, "invalid_request_error"), (404, "not_found_error"), (500, "server_error")]
)
def test_tritons_error_is_an_openai_envelope(status: int, kind: str) -> None:
    raw = json.dumps({"error": "Request for unknown model: 'ensembl' is not found"}).encode()
    error = json.loads(chat_for(max_tokens=8).translator.error(status, raw))["error"]
    assert error["message"] == "Request for unknown model: 'ensembl' is not found"
    assert error["type"] == kind and error["code"] == "upstream_status" and error["param"] is None


def test_an_error_body_that_is_not_tritons_keeps_its_text_or_says_the_status() -> None:
    translator = chat_for(max_tokens=8).translator
    assert json.loads(translator.error(502, b"Bad Gateway\n"))["error"]["message"] == "Bad Gateway"
    assert json.loads(translator.error(503, b""))["error"]["message"] == "Triton answered HTTP 503."


# --- the stream --------------------------------------------------------------------------------------


def test_a_stream_is_openai_chunks_then_the_finish_usage_and_done() -> None:
    exchange = chat_for(max_tokens=16, stream=True)
    out, end = _stream(exchange, [_event(p) for p in PIECES])
    events = _events(out + end)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": "The"}
    assert _texts(events) == "".join(PIECES)
    assert all(e["model"] == "ensemble" and e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    assert events[-2] == {
        **events[-2],
        "choices": [],
        "usage": {"prompt_tokens": 19, "completion_tokens": len(PIECES), "total_tokens": 19 + len(PIECES)},
    }


def test_a_stream_split_at_every_byte_reads_the_same() -> None:
    raw = b"".join(_event(p) for p in PIECES)
    whole = _events(b"".join(_stream(chat_for(max_tokens=16, stream=True), [raw])))
    translator = chat_for(max_tokens=16, stream=True).translator.stream()
    bytewise = b"".join(translator.feed(raw[i : i + 1]) for i in range(len(raw))) + translator.end()
    assert _without_identity(_events(bytewise)) == _without_identity(whole)


def test_a_stream_reaching_max_tokens_finishes_with_length() -> None:
    events = _events(b"".join(_stream(chat_for(max_tokens=3, stream=True), [_event(p) for p in PIECES[:3]])))
    assert events[-3]["choices"][0]["finish_reason"] == "length"


def test_a_stop_string_split_across_pieces_is_held_back_and_cut() -> None:
    exchange = chat_for(max_tokens=24, stop=[" vast"], stream=True)
    pieces = ["The", " sea", " is", " a", " va", "st", " expanse"]
    translator = exchange.translator.stream()
    outs = [translator.feed(_event(p)) for p in pieces]
    assert _texts(_events(outs[4])) == ""  # " va" may begin the stop string: held back
    events = _events(b"".join(outs) + translator.end())
    assert _texts(events) == "The sea is a"
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["usage"]["completion_tokens"] == len(pieces)


def test_held_back_text_that_is_no_stop_string_is_sent_at_the_end() -> None:
    exchange = chat_for(max_tokens=24, stop=[" vast"], stream=True)
    events = _events(b"".join(_stream(exchange, [_event("The"), _event(" va")])))
    assert _texts(events) == "The va" and events[-3]["choices"][0]["finish_reason"] == "stop"


def test_a_completion_stream_is_text_completion_chunks() -> None:
    exchange = exchange_for(
        "/completions", {"prompt": "The three primary colours are", "stream": True}, stream=True
    )
    events = _events(b"".join(_stream(exchange, [_event(" red", 6), _event(",", 6)])))
    assert events[0]["object"] == "text_completion" and events[0]["choices"][0]["text"] == " red"
    assert events[-2]["usage"] == {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8}


def test_a_stream_without_counts_is_estimated() -> None:
    events = _events(
        b"".join(_stream(chat_for(max_tokens=50, stream=True), [_event("Hello there", None, None)]))
    )
    assert events[-2]["usage"]["completion_tokens"] == 3 and events[-2]["usage"]["prompt_tokens"] > 0


def test_an_error_event_mid_stream_is_openais_and_the_stream_stays_failed() -> None:
    translator = chat_for(max_tokens=16, stream=True).translator.stream()
    first = translator.feed(_event("The"))
    failed = translator.feed(
        b'data: {"error":"Executor failed process requestId 7 due to the following error"}\n\n'
    )
    event = _events(failed)[-1]
    assert (
        event["error"]["message"].startswith("Executor failed") and event["error"]["type"] == "server_error"
    )
    assert translator.feed(_event(" sea")) == b"" and translator.end() == b""
    assert _texts(_events(first)) == "The"


def test_a_cut_stream_stays_cut() -> None:
    raw = b"".join(_event(p) for p in PIECES[:3]) + b'data: {"model_name":"ensemble","num_in'
    assert _stream(chat_for(max_tokens=200, stream=True), [raw])[1] == b""
    assert _stream(chat_for(max_tokens=200, stream=True), [])[1] == b""


def test_a_malformed_stream_event_is_a_protocol_error() -> None:
    translator = chat_for(max_tokens=16, stream=True).translator.stream()
    with pytest.raises(UpstreamProtocolError):
        translator.feed(b"data: not json\n\n")
    with pytest.raises(UpstreamProtocolError):
        chat_for(max_tokens=16, stream=True).translator.stream().feed(b'data: {"text": "x"}\n\n')


def test_the_recorded_stream_reads_as_the_recorded_plain_answer() -> None:
    transcript = load_transcript("triton")
    responses = {e["name"]: e["response"] for e in transcript["exchanges"]}
    plain = json.loads(chat_for(max_tokens=16).translator.body(responses["chat"]["chunks"][0].encode()))
    chunks = [c.encode() for c in responses["chat-stream"]["chunks"]]
    events = _events(b"".join(_stream(chat_for(max_tokens=16, stream=True), chunks)))
    assert _texts(events) == plain["choices"][0]["message"]["content"]
    assert events[-2]["usage"] == plain["usage"]
    assert DONE.strip() == b"data: [DONE]"
