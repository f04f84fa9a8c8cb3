"""The triton tests' wire: the exchange a request makes, the body it sends, and what is always in it."""

from __future__ import annotations

import json
from typing import Any

from gateway.adapters.base import Exchange
from gateway.adapters.triton import TritonAdapter

ORIGIN = "http://10.0.0.7:8000"
MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]
CHATML = "<|im_start|>user\nWrite one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n"
ALWAYS = {"exclude_input_in_output": True, "return_num_input_tokens": True, "return_num_output_tokens": True}


def exchange_for(
    path: str, body: dict[str, Any], *, stream: bool = False, template: str = "chatml"
) -> Exchange:
    exchange = TritonAdapter(chat_template=template).exchange(
        path, {"model": "ensemble", **body}, ORIGIN, stream=stream
    )
    assert exchange is not None
    return exchange


def chat_for(*, stream: bool = False, **body: Any) -> Exchange:
    return exchange_for("/chat/completions", {"messages": MESSAGES, "stream": stream, **body}, stream=stream)


def sent_body(exchange: Exchange) -> dict[str, Any]:
    sent: dict[str, Any] = json.loads(exchange.body)
    return sent
