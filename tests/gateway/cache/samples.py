"""Responses as an OpenAI-compatible server sends them, for the entry and replay tests."""

from __future__ import annotations

from typing import Any

import msgspec

USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}

CHAT: dict[str, Any] = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1764400000,
    "model": "small",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The capital of France is Paris. " * 3},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": USAGE,
    "system_fingerprint": "fp_1",
}

TOOLS: dict[str, Any] = {
    "id": "chatcmpl-tools",
    "object": "chat.completion",
    "created": 1764400001,
    "model": "small",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": USAGE,
}

TWO_CHOICES: dict[str, Any] = {
    **CHAT,
    "id": "chatcmpl-two",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "One."},
            "logprobs": None,
            "finish_reason": "stop",
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "Two!"},
            "logprobs": None,
            "finish_reason": "length",
        },
    ],
}

TEXT: dict[str, Any] = {
    "id": "cmpl-xyz",
    "object": "text_completion",
    "created": 1764400002,
    "model": "small",
    "choices": [{"text": " Paris, of course.", "index": 0, "logprobs": None, "finish_reason": "stop"}],
    "usage": USAGE,
}


def encode(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj)
