"""TGI's answers read back as OpenAI's: ``/generate_stream`` folded or streamed as a text completion
(stop strings cut, split at every byte), the Messages API's answers and streams rewritten."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.adapters.base import Exchange
from gateway.adapters.tgi import TgiAdapter
from gateway.errors import UpstreamProtocolError
from tests.gateway.adapters.tgi.wire import (
    LENGTH_STREAM,
    MESSAGES,
    MODEL,
    ORIGIN,
    chat_chunk,
    details,
    exchange_for,
    feed_whole,
    openai_events,
    sse,
    token_event,
)


def _without_identity(events: list[Any]) -> list[Any]:
    return [
        {k: v for k, v in e.items() if k not in ("id", "created")} if isinstance(e, dict) else e
        for e in events
    ]


def _feed_bytewise(exchange: Exchange, raw: bytes) -> bytes:
    stream = exchange.translator.stream()
    out = b"".join(stream.feed(raw[i : i + 1]) for i in range(len(raw)))
    return out + stream.end()


# --- /completions: /generate_stream ------------------------------------------------------------------


def test_a_plain_completion_is_the_stream_folded() -> None:
    exchange = exchange_for("/completions", {"prompt": "The sky is"})
    answer = json.loads(exchange.translator.body(b"".join(LENGTH_STREAM)))
    assert answer["object"] == "text_completion" and answer["model"] == MODEL
    assert answer["id"].startswith("cmpl-")
    assert answer["choices"] == [
        {"index": 0, "text": " blue, and", "logprobs": None, "finish_reason": "length"}
    ]
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_the_end_of_sequence_is_stop_and_its_token_is_not_text() -> None:
    raw = token_event(1, " blue") + token_event(
        2, "<|im_end|>", special=True, last=(" blue", details("eos_token", 2))
    )
    exchange = exchange_for("/completions", {"prompt": "The sky is"})
    answer = json.loads(exchange.translator.body(raw))
    assert (answer["choices"][0]["text"], answer["choices"][0]["finish_reason"]) == (" blue", "stop")
    events = openai_events(feed_whole(exchange, [raw])[0])
    assert [e["choices"][0]["text"] for e in events[:-2]] == [" blue", ""]
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


def test_the_stop_string_tgi_keeps_is_cut() -> None:
    raw = (
        token_event(1, " blue")
        + token_event(2, " on")
        + token_event(3, " wh")
        + token_event(4, "ispers", last=(" blue on whispers", details("stop_sequence", 4)))
    )
    exchange = exchange_for("/completions", {"prompt": "The sky is", "stop": [" whispers", "zzz"]})
    answer = json.loads(exchange.translator.body(raw))
    assert (answer["choices"][0]["text"], answer["choices"][0]["finish_reason"]) == (" blue on", "stop")
    assert answer["usage"]["completion_tokens"] == 4
    events = openai_events(_feed_bytewise(exchange, raw))
    assert "".join(e["choices"][0]["text"] for e in events[:-2]) == " blue on"
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


def test_a_stop_string_tgi_ran_past_is_cut_and_ends_with_stop() -> None:
    raw = token_event(1, " island") + token_event(2, "s", last=(" islands", details("length", 2)))
    exchange = exchange_for("/completions", {"prompt": "x", "stop": " is"})
    answer = json.loads(exchange.translator.body(raw))
    assert (answer["choices"][0]["text"], answer["choices"][0]["finish_reason"]) == ("", "stop")


def test_a_completion_stream_is_openai_chunks_then_usage_and_done() -> None:
    exchange = exchange_for("/completions", {"prompt": "The sky is"}, stream=True)
    out, tail = feed_whole(exchange, LENGTH_STREAM)
    assert tail == b""
    events = openai_events(out)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {e["id"] for e in chunks} == {chunks[0]["id"]}
    assert all(e["model"] == MODEL and e["object"] == "text_completion" for e in chunks)
    assert [e["choices"][0]["text"] for e in chunks[:3]] == [" blue", ",", " and"]
    assert chunks[3]["choices"] == [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]
    assert chunks[4]["choices"] == [] and chunks[4]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
    }


def test_a_completion_stream_split_at_every_byte_reads_the_same() -> None:
    exchange = exchange_for("/completions", {"prompt": "The sky is", "stop": [" and"]}, stream=True)
    raw = b"".join(LENGTH_STREAM)
    whole = openai_events(feed_whole(exchange, [raw])[0])
    for cut in range(1, len(raw)):
        split = openai_events(b"".join(feed_whole(exchange, [raw[:cut], raw[cut:]])))
        assert _without_identity(split) == _without_identity(whole)
    assert _without_identity(openai_events(_feed_bytewise(exchange, raw))) == _without_identity(whole)
    assert "".join(e["choices"][0]["text"] for e in whole[:-2]) == " blue,"


def test_a_cut_completion_stream_stays_cut() -> None:
    exchange = exchange_for("/completions", {"prompt": "The sky is"}, stream=True)
    out, tail = feed_whole(exchange, LENGTH_STREAM[:2])
    assert tail == b"" and b"[DONE]" not in out
    assert [e["choices"][0]["text"] for e in openai_events(out)] == [" blue", ","]
    with pytest.raises(UpstreamProtocolError):
        exchange.translator.body(b"".join(LENGTH_STREAM[:2]))


@pytest.mark.parametrize(
    "raw",
    [
        b"data:not json\n\n",
        b"data:[1,2]\n\n",
        sse({"index": 1, "token": None, "generated_text": None, "details": None}),
        sse(
            {
                "index": 1,
                "token": {"id": 1, "text": "a", "special": False},
                "generated_text": "a",
                "details": None,
            }
        ),
        sse(
            {
                "index": 1,
                "token": {"id": 1, "text": "a", "special": False},
                "generated_text": "a",
                "details": {},
            }
        ),
    ],
)
def test_a_malformed_answer_is_a_protocol_error(raw: bytes) -> None:
    exchange = exchange_for("/completions", {"prompt": "x"}, stream=True)
    with pytest.raises(UpstreamProtocolError):
        exchange.translator.body(raw)
    with pytest.raises(UpstreamProtocolError):
        exchange.translator.stream().feed(raw)


# --- /chat/completions: the Messages API ------------------------------------------------------------


def _chat_body(content: str, reason: str, *, model: str = MODEL) -> bytes:
    document = {
        "object": "chat.completion",
        "id": "",
        "created": 1757416402,
        "model": model,
        "system_fingerprint": "3.3.6-native",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": reason,
            }
        ],
        "usage": {"prompt_tokens": 36, "completion_tokens": 3, "total_tokens": 39},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def test_a_chat_answer_names_the_model_and_has_an_id() -> None:
    served_as_tgi = TgiAdapter().exchange(
        "/chat/completions", {"model": "tgi", "messages": MESSAGES}, ORIGIN, stream=False
    )
    assert served_as_tgi is not None
    answer = json.loads(served_as_tgi.translator.body(_chat_body("The sea is", "length")))
    assert answer["model"] == "tgi"  # TGI names its own model for "tgi"
    assert answer["id"].startswith("chatcmpl-")
    assert answer["system_fingerprint"] == "3.3.6-native" and answer["usage"]["total_tokens"] == 39
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "The sea is"}


def test_a_chat_answer_loses_the_stop_string_and_tgis_finish_reason() -> None:
    translator = exchange_for("/chat/completions", {"messages": MESSAGES, "stop": [" is"]}).translator
    answer = json.loads(translator.body(_chat_body("The sea is", "stop_sequence")))
    assert answer["choices"][0]["message"]["content"] == "The sea"
    assert answer["choices"][0]["finish_reason"] == "stop"


def test_a_tool_call_answer_passes() -> None:
    document = json.loads(_chat_body("", "stop"))
    call = {"id": "0", "type": "function", "function": {"name": "sea", "arguments": {"depth": 4}}}
    document["choices"][0]["message"] = {"role": "assistant", "tool_calls": [call]}
    translator = exchange_for("/chat/completions", {"messages": MESSAGES}).translator
    answer = json.loads(translator.body(json.dumps(document).encode()))
    assert answer["choices"][0]["message"] == {"role": "assistant", "tool_calls": [call]}


USAGE_CHUNK = {
    "object": "chat.completion.chunk",
    "id": "",
    "created": 1757416402,
    "model": MODEL,
    "system_fingerprint": "3.3.6-native",
    "choices": [],
    "usage": {"prompt_tokens": 36, "completion_tokens": 4, "total_tokens": 40},
}
CHAT_STREAM = [
    sse(chat_chunk("The")),
    sse(chat_chunk(" sea")),
    b":\n\n",  # axum's keep-alive comment
    sse(chat_chunk(" wh")),
    sse(chat_chunk("ispers", "stop_sequence")),
    sse(USAGE_CHUNK),
    b"data:[DONE]\n\n",
]


def test_a_chat_stream_passes_with_the_stop_string_held_back_and_cut() -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES, "stop": [" whispers"]}, stream=True)
    out, tail = feed_whole(exchange, CHAT_STREAM)
    assert tail == b""
    events = out.split(b"\n\n")[:-1]
    assert events[2] == b":" and events[-1] == b"data:[DONE]"
    chunks = [json.loads(e[len(b"data: ") :]) for e in events if e.startswith(b"data: {")]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["id"].startswith("chatcmpl-")
    assert [c["choices"][0]["delta"]["content"] for c in chunks[:-1]] == ["The", " sea", "", ""]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "stop"]
    assert chunks[-1]["usage"] == USAGE_CHUNK["usage"] and chunks[-1]["choices"] == []


def test_held_back_text_that_is_no_stop_string_comes_with_the_next_chunk() -> None:
    raw = [
        sse(chat_chunk("The")),
        sse(chat_chunk(" wh")),
        sse(chat_chunk("ale", "length")),
        b"data:[DONE]\n\n",
    ]
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES, "stop": " whispers"}, stream=True)
    out = feed_whole(exchange, raw)[0]
    chunks = [json.loads(e[6:]) for e in out.split(b"\n\n")[:-1] if e.startswith(b"data: {")]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["The", "", " whale"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_a_chat_stream_split_at_every_byte_reads_the_same() -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES, "stop": [" whispers"]}, stream=True)
    raw = b"".join(CHAT_STREAM)

    def read(out: bytes) -> list[Any]:
        return [
            {k: v for k, v in json.loads(e[6:]).items() if k != "id"} if e.startswith(b"data: {") else e
            for e in out.split(b"\n\n")[:-1]
        ]

    whole = read(feed_whole(exchange, [raw])[0])
    assert read(_feed_bytewise(exchange, raw)) == whole
    for cut in range(1, len(raw), 7):
        assert read(b"".join(feed_whole(exchange, [raw[:cut], raw[cut:]]))) == whole


def test_a_cut_chat_stream_stays_cut() -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES}, stream=True)
    out, tail = feed_whole(exchange, [sse(chat_chunk("The")), sse(chat_chunk(" sea"))[:20]])
    assert tail == b"" and out.count(b"\n\n") == 1


def test_a_malformed_chat_answer_is_a_protocol_error() -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES}, stream=True)
    for raw in (b"not json", b"[1]", b'{"object":"chat.completion","model":"m"}', b'{"choices":[1]}'):
        with pytest.raises(UpstreamProtocolError):
            exchange.translator.body(raw)
        with pytest.raises(UpstreamProtocolError):
            exchange.translator.stream().feed(b"data:" + raw + b"\n\n")
