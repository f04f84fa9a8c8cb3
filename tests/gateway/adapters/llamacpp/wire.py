"""The llamacpp tests' wire: what llama.cpp's server sent, and the exchange a request makes.

The native payloads are what llama.cpp's server (the build ``xllamacpp`` ships) sent for SmolLM2,
trimmed of ``generation_settings``; the shapes are documented in llama.cpp's tools/server/README.md.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.adapters.base import Exchange
from gateway.adapters.llamacpp import LlamaCppAdapter

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


def plain_answer(**fields: Any) -> bytes:
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


def exchange_for(path: str, body: dict[str, Any], *, stream: bool = False) -> Exchange:
    exchange = LlamaCppAdapter().exchange(path, {"model": MODEL, **body}, ORIGIN, stream=stream)
    assert exchange is not None
    return exchange


def completion_for(stream: bool = False, **body: Any) -> Exchange:
    return exchange_for("/completions", {"prompt": "The three primary colours are", **body}, stream=stream)


def sent_body(exchange: Exchange) -> dict[str, Any]:
    document: dict[str, Any] = msgspec.json.decode(exchange.body)
    return document
