"""``LlamaCppAdapter``: which llama.cpp route each OpenAI path goes to, and its health and load pages.

- ``/completions`` goes to the native ``POST /completion`` (``gateway.adapters.llamacpp.request``,
  ``gateway.adapters.llamacpp.answer``).
- ``/chat/completions`` and ``/embeddings`` go to llama.cpp's own OpenAI mode (``/v1/...``), which
  applies the model's real chat template; its answers are OpenAI's already, only ``model`` (the
  server's alias or model path) becomes the request's.
- ``/responses`` is sent in OpenAI mode, unchanged.
- Health ``GET /health`` (503 while the model loads). Load: ``GET /slots``, or ``/metrics`` where the
  replica's ``metrics_url`` points there (``gateway.adapters.llamacpp.load``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from gateway.adapters.base import Adapter, Exchange
from gateway.adapters.llamacpp.answer import CompletionTranslator, OpenAIModeTranslator
from gateway.adapters.llamacpp.load import metrics_load, slots_load
from gateway.adapters.llamacpp.request import completion_request
from gateway.adapters.load import ReplicaLoad

__all__ = ["LlamaCppAdapter"]

_encode = msgspec.json.encode


class LlamaCppAdapter(Adapter):
    """llama.cpp's server: native ``/completion``, OpenAI mode for chat and embeddings."""

    kind: ClassVar[str] = "llamacpp"
    metrics_path: ClassVar[str] = "/slots"

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        model = str(body.get("model", ""))
        if path == "/completions":
            native = completion_request(body, stream=stream)
            return Exchange(root + "/completion", _encode(native), CompletionTranslator(model), stream)
        if path in ("/chat/completions", "/embeddings"):
            return Exchange(root + "/v1" + path, _encode(body), OpenAIModeTranslator(model), stream)
        return None

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        start = page.lstrip()[:1]
        if start == b"[":
            return slots_load(page)
        if start == b"{":  # an error object: the page is switched off (--no-slots)
            return None
        return metrics_load(page)
