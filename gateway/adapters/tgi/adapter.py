"""``TgiAdapter``: which TGI route each OpenAI path goes to, and TGI's health and load pages.

``/completions`` goes to TGI's native ``POST /generate_stream``, plain requests too: the stream's last
event is where TGI states the prompt's token count (``details.input_length``); plain ``/generate``
states it only when asked for the prompt's logprobs (``decoder_input_details``), which costs logits
over the whole prompt and bypasses TGI's prefix cache. A plain answer is the stream folded into one
body (``gateway.adapters.tgi.answer``).

``/chat/completions`` goes to TGI's Messages API, ``POST /v1/chat/completions``, which applies the
model's own chat template (TGI has no native chat route).

``/embeddings`` and ``/responses`` are refused: TGI serves neither (a TEI pool embeds).

Health: ``GET /health`` (200 once the model is loaded). Load, from ``/metrics``: ``tgi_queue_size``
waiting, ``tgi_batch_current_size`` running; KV use is ``tgi_batch_current_max_tokens`` (the tokens
the running batch has reserved) over ``tgi_batch_max_total_tokens`` (the token capacity TGI's v3
backend found at warm-up, which its scheduler budgets against), 0 when the page lacks the capacity.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from gateway.adapters.base import Adapter, Exchange
from gateway.adapters.load import ReplicaLoad, fraction, prometheus_values
from gateway.adapters.tgi.answer import GenerateTranslator, MessagesTranslator
from gateway.adapters.tgi.request import chat_body, generate_inputs, generate_parameters
from gateway.errors import InvalidRequest

__all__ = ["TgiAdapter", "parse_tgi_metrics"]

_encode = msgspec.json.encode


class TgiAdapter(Adapter):
    """TGI: native ``/generate_stream`` for text, its Messages API for chat."""

    kind: ClassVar[str] = "tgi"
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str] = "/metrics"

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        model = body.get("model")
        model = model if isinstance(model, str) else ""
        if path == "/completions":
            parameters, stops = generate_parameters(body)
            native = {"inputs": generate_inputs(body.get("prompt")), "parameters": parameters}
            translator: GenerateTranslator | MessagesTranslator = GenerateTranslator(model, stops)
            return Exchange(root + "/generate_stream", _encode(native), translator, stream)
        if path == "/chat/completions":
            chat, stops = chat_body(body)
            translator = MessagesTranslator(model, stops)
            return Exchange(root + "/v1/chat/completions", _encode(chat), translator, stream)
        if path == "/embeddings":
            raise InvalidRequest(
                "TGI replicas do not embed: send embeddings to a pool of a text-embeddings-inference "
                "(TEI) or OpenAI-compatible server.",
                param="model",
            )
        raise InvalidRequest(
            f"TGI replicas do not serve {path}: use /chat/completions, or a pool of kind `openai`.",
            param="model",
        )

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        return parse_tgi_metrics(page)


_QUEUE = b"tgi_queue_size"
_BATCH = b"tgi_batch_current_size"
_BATCH_TOKENS = b"tgi_batch_current_max_tokens"
_CAPACITY = b"tgi_batch_max_total_tokens"


def parse_tgi_metrics(page: bytes) -> ReplicaLoad | None:
    """TGI's load: ``tgi_queue_size`` waiting, ``tgi_batch_current_size`` running, and the running
    batch's reserved tokens over the token capacity as KV use; None when the page has neither count."""
    values = prometheus_values(page, (_QUEUE, _BATCH, _BATCH_TOKENS, _CAPACITY))
    if _QUEUE not in values and _BATCH not in values:
        return None
    capacity = max(values.get(_CAPACITY, ()), default=0.0)
    reserved = sum(values.get(_BATCH_TOKENS, ()))
    kv = fraction(reserved / capacity) if capacity > 0 else 0.0
    return ReplicaLoad(sum(values.get(_QUEUE, ())), sum(values.get(_BATCH, ())), kv)
