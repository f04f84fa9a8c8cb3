"""``kind: llamacpp``: request mapping, answers, streams, errors and load pages, on llama.cpp's own wire.

The native payloads are what llama.cpp's server (the build ``xllamacpp`` ships) sent for SmolLM2,
trimmed of ``generation_settings``; the shapes are documented in llama.cpp's tools/server/README.md.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.adapters import build_adapter
from gateway.adapters.base import Exchange
from gateway.adapters.llamacpp import LlamaCppAdapter
from gateway.adapters.load import ReplicaLoad
from gateway.errors import InvalidRequest, UpstreamProtocolError

ORIGIN = "http://10.0.0.7:8080"
MODEL = "smollm2"

# POST /completion {"prompt": "The three primary colours are", "n_predict": 5, "stream": true}, the
# prompt cached by an earlier request: timings.prompt_n counts 1 computed token, tokens_evaluated all 5
NATIVE_STREAM = (
    b'data: {"index":0,"content":" the","tokens":[260],"stop":false,"id_slot":-1,'
    b'"tokens_predicted":1,"tokens_evaluated":5}\n\n'
    b'data: {"index":0,"content":" primary","tokens":[3003],"stop":false,"id_slot":-1,'
    b'"tokens_predicted":2,"tokens_evaluated":5}\n\n'
    b'data: {"index":0,"content":" colours","tokens":[14797],"stop":false,"id_slot":-1,'
    b'"tokens_predicted":3,"tokens_evaluated":5}\n\n'
    b'data: {"index":0,"content":" of","tokens":[282],"stop":false,"id_slot":-1,'
    b'"tokens_predicted":4,"tokens_evaluated":5}\n\n'
    b'data: {"index":0,"content":" the","tokens":[260],"stop":false,"id_slot":-1,'
    b'"tokens_predicted":5,"tokens_evaluated":5}\n\n'
    b'data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"SmolLM2.gguf",'
    b'"tokens_predicted":5,"tokens_evaluated":5,"prompt":"The three primary colours are",'
    b'"has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":9,'
    b'"timings":{"cache_n":4,"prompt_n":1,"prompt_ms":24.193,"predicted_n":5,"predicted_ms":86.861}}\n\n'
)


def _plain(**fields: Any) -> bytes:
    answer = {
        "index": 0,
        "content": " the primary colours of the human eye: red,",
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": "SmolLM2.gguf",
        "tokens_predicted": 11,
        "tokens_evaluated": 5,
        "prompt": "The three primary colours are",
        "has_new_line": False,
        "truncated": False,
        "stop_type": "word",
        "stopping_word": " blue",
        "tokens_cached": 15,
        "timings": {"cache_n": 4, "prompt_n": 1, "predicted_n": 11},
    }
    answer.update(fields)
    return msgspec.json.encode({k: v for k, v in answer.items() if v is not None})


CHAT_STREAM = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],'
    b'"created":1796165062,"id":"chatcmpl-8qV3","model":"SmolLM2.gguf","system_fingerprint":"b0-unknown",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"The"}}],"created":1796165062,'
    b'"id":"chatcmpl-8qV3","model":"SmolLM2.gguf","system_fingerprint":"b0-unknown",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796165062,'
    b'"id":"chatcmpl-8qV3","model":"SmolLM2.gguf","system_fingerprint":"b0-unknown",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[],"created":1796165062,"id":"chatcmpl-8qV3","model":"SmolLM2.gguf",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":1,'
    b'"prompt_tokens":37,"total_tokens":38,"prompt_tokens_details":{"cached_tokens":36}},'
    b'"timings":{"cache_n":36,"prompt_n":1,"predicted_n":1}}\n\n'
    b"data: [DONE]\n\n"
)

EXCEEDS = (
    b'{"error":{"code":400,"message":"request (5001 tokens) exceeds the available context size '
    b'(2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5001,'
    b'"n_ctx":2048}}'
)

METRICS = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 18
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
"""


def _exchange(path: str, body: dict[str, Any], *, stream: bool = False) -> Exchange:
    exchange = LlamaCppAdapter().exchange(path, {"model": MODEL, **body}, ORIGIN, stream=stream)
    assert exchange is not None
    return exchange


def _completion(stream: bool = False, **body: Any) -> Exchange:
    return _exchange("/completions", {"prompt": "The three primary colours are", **body}, stream=stream)


def _sent(exchange: Exchange) -> dict[str, Any]:
    document: dict[str, Any] = msgspec.json.decode(exchange.body)
    return document


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


# -- requests ------------------------------------------------------------------------------------


def test_the_kind_and_its_pages() -> None:
    adapter = build_adapter("llamacpp")
    assert isinstance(adapter, LlamaCppAdapter)
    assert (adapter.kind, adapter.health_path, adapter.metrics_path) == ("llamacpp", "/health", "/slots")


def test_a_completion_goes_to_the_native_route_with_llama_cpp_names() -> None:
    exchange = _completion(
        max_tokens=16,
        temperature=0,
        top_p=0.9,
        seed=7,
        stop="\n",
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={"15043": -100},
        top_k=20,
        stream_options={"include_usage": True},
        user="u-1",
        n=1,
        echo=False,
        logprobs=None,
    )
    assert exchange.url == ORIGIN + "/completion" and not exchange.stream
    assert _sent(exchange) == {
        "model": MODEL,
        "prompt": "The three primary colours are",
        "n_predict": 16,
        "temperature": 0,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["\n"],
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "logit_bias": {"15043": -100},
        "top_k": 20,
        "stream": False,
        "cache_prompt": True,
    }


def test_a_stream_asks_for_one_and_an_absent_length_is_openais_default() -> None:
    sent = _sent(_completion(stream=True, stop=["a", "b"], cache_prompt=False))
    assert sent["stream"] is True and sent["stop"] == ["a", "b"] and sent["cache_prompt"] is False
    assert sent["n_predict"] == 16 and "temperature" not in sent


@pytest.mark.parametrize(
    ("prompt", "sent"),
    [("x", "x"), (["x"], "x"), ([1, 2, 3], [1, 2, 3]), ([[1, 2, 3]], [1, 2, 3])],
)
def test_one_prompt_as_text_or_token_ids(prompt: Any, sent: Any) -> None:
    assert _sent(_completion(prompt=prompt))["prompt"] == sent


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("best_of", 3),
        ("logprobs", 0),
        ("logprobs", 2),
        ("echo", True),
        ("suffix", "def f():"),
        ("prompt", ["one", "two"]),
        ("prompt", []),
        ("prompt", None),
        ("prompt", [1, "a"]),
        ("n_probs", 5),
        ("n_cmpl", 2),
    ],
)
def test_what_the_answer_cannot_carry_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _completion(**{field: value})
    assert caught.value.status == 400 and caught.value.param == field


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_chat_and_embeddings_go_to_its_openai_mode_unchanged(path: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": True, "max_tokens": 4}
    exchange = _exchange(path, body, stream=path == "/chat/completions")
    assert exchange.url == ORIGIN + "/v1" + path
    assert _sent(exchange) == {"model": MODEL, **body}


def test_responses_are_sent_in_openai_mode() -> None:
    assert (
        LlamaCppAdapter().exchange("/responses", {"model": MODEL, "input": "hi"}, ORIGIN, stream=False)
        is None
    )


# -- plain answers -------------------------------------------------------------------------------


def test_a_plain_answer_bills_the_whole_prompt_the_cache_served_included() -> None:
    body = msgspec.json.decode(_completion().translator.body(_plain()))
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
    body = msgspec.json.decode(_completion().translator.body(_plain(**fields)))
    assert body["choices"][0]["finish_reason"] == finish


def test_counts_fall_back_to_timings_with_the_cached_prompt_part() -> None:
    payload = _plain(tokens_evaluated=None, tokens_predicted=None)
    body = msgspec.json.decode(_completion().translator.body(payload))
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 11, "total_tokens": 16}


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        _plain(content=7),
        _plain(tokens_evaluated=None, timings={"predicted_n": 3}),
    ],
)
def test_a_malformed_answer_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        _completion().translator.body(payload)


# -- streams -------------------------------------------------------------------------------------


def test_a_stream_becomes_openai_chunks_ending_in_finish_usage_and_done() -> None:
    exchange = _completion(stream=True)
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
    exchange = _completion(stream=True)
    whole = _without_identity(_events(_feed_split(exchange, NATIVE_STREAM, len(NATIVE_STREAM))))
    for cut in range(len(NATIVE_STREAM)):
        assert _without_identity(_events(_feed_split(exchange, NATIVE_STREAM, cut))) == whole, cut


def test_pings_and_crlf_are_read_as_sse() -> None:
    native = b": ping\r\n\r\n" + NATIVE_STREAM.replace(b"\n", b"\r\n")
    stream = _completion(stream=True).translator.stream()
    assert _events(stream.feed(native))[-1] == "[DONE]"


def test_a_cut_stream_stays_cut() -> None:
    stream = _completion(stream=True).translator.stream()
    cut = NATIVE_STREAM[: NATIVE_STREAM.index(b'data: {"index":0,"content":" of"') + 20]
    events = _events(stream.feed(cut) + stream.end())
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None]


def test_an_error_mid_stream_is_an_openai_error_event() -> None:
    native = NATIVE_STREAM[: NATIVE_STREAM.index(b"\n\n") + 2] + (
        b'data: {"error":{"code":500,"message":"Input prompt is too big","type":"server_error"}}\n\n'
    )
    stream = _completion(stream=True).translator.stream()
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
        _completion(stream=True).translator.stream().feed(b"data: {nope\n\n")


# -- openai mode ---------------------------------------------------------------------------------


def test_openai_mode_answers_name_the_requests_model() -> None:
    answer = (
        b'{"choices":[{"finish_reason":"length","index":0,'
        b'"message":{"role":"assistant","content":"The sea"}}],"created":1796165062,"model":"SmolLM2.gguf",'
        b'"object":"chat.completion","usage":{"completion_tokens":2,'
        b'"prompt_tokens":37,"total_tokens":39},"id":"chatcmpl-OIUT"}'
    )
    body = msgspec.json.decode(_exchange("/chat/completions", {}).translator.body(answer))
    expected = msgspec.json.decode(answer)
    expected["model"] = MODEL
    assert body == expected


def test_an_openai_mode_stream_passes_event_by_event_with_the_model_set() -> None:
    exchange = _exchange("/chat/completions", {}, stream=True)
    expected = _events(CHAT_STREAM)
    for event in expected[:-1]:
        event["model"] = MODEL
    for cut in range(len(CHAT_STREAM)):
        assert _events(_feed_split(exchange, CHAT_STREAM, cut)) == expected, cut


def test_an_openai_mode_stream_cut_before_done_stays_cut() -> None:
    stream = _exchange("/chat/completions", {}, stream=True).translator.stream()
    out = stream.feed(CHAT_STREAM[:-3]) + stream.end()
    assert "[DONE]" not in _events(out)


def test_an_openai_mode_error_event_is_normalised() -> None:
    stream = _exchange("/chat/completions", {}, stream=True).translator.stream()
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
    exchange = _exchange(path, {"prompt": "x"} if path == "/completions" else {})
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
    error = msgspec.json.decode(_completion().translator.error(status, payload))["error"]
    assert (error["message"], error["code"], error["param"]) == (message, code, None)
    assert error["type"] == (
        "server_error" if status >= 500 else "invalid_request_error" if status == 400 else "not_found_error"
    )


# -- load ----------------------------------------------------------------------------------------


def _slot(processing: bool, tokens: int | None = None, n_ctx: int = 2048) -> dict[str, Any]:
    slot: dict[str, Any] = {"id": 0, "n_ctx": n_ctx, "speculative": False, "is_processing": processing}
    if tokens is not None:
        slot.update(
            {
                "id_task": 2,
                "n_prompt_tokens": tokens,
                "n_prompt_tokens_processed": 0,
                "n_prompt_tokens_cache": 0,
                "next_token": [
                    {"has_next_token": True, "has_new_line": False, "n_remain": 60, "n_decoded": 0}
                ],
            }
        )
    return slot


@pytest.mark.parametrize(
    ("slots", "load"),
    [
        ([_slot(False)], ReplicaLoad(0.0, 0.0, 0.0)),
        ([_slot(True, 512)], ReplicaLoad(0.0, 1.0, 0.25)),
        ([_slot(True, 512, 1024), _slot(False, 900, 1024)], ReplicaLoad(0.0, 1.0, 0.25)),
        ([_slot(True, 1024, 1024), _slot(True, 1024, 1024)], ReplicaLoad(0.0, 2.0, 1.0)),
        ([{"id": 0, "is_processing": True, "next_token": {"n_decoded": 3}}], ReplicaLoad(0.0, 1.0, 0.0)),
        ([], ReplicaLoad(0.0, 0.0, 0.0)),
    ],
)
def test_slots_page(slots: list[dict[str, Any]], load: ReplicaLoad) -> None:
    assert LlamaCppAdapter().parse_load(msgspec.json.encode(slots)) == load


def test_metrics_page() -> None:
    adapter = LlamaCppAdapter()
    assert adapter.parse_load(METRICS) == ReplicaLoad(2.0, 1.0, 0.0)
    older = METRICS + b"llamacpp:kv_cache_usage_ratio 0.375\nllamacpp:kv_cache_tokens 768\n"
    assert adapter.parse_load(older) == ReplicaLoad(2.0, 1.0, 0.375)


@pytest.mark.parametrize(
    "page",
    [
        b'{"error":{"code":501,"message":"This server does not support slots endpoint.",'
        b'"type":"not_supported_error"}}',
        b"[not json",
        b"# nothing here\nother_metric 1\n",
        b"",
    ],
)
def test_pages_without_load(page: bytes) -> None:
    assert LlamaCppAdapter().parse_load(page) is None
