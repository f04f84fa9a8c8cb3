"""``TritonAdapter``: where Triton's generate extension takes a request, and Triton's health page.

The request goes to ``POST {root}/v2/models/{model}/generate`` (``/generate_stream`` for a
stream), ``{model}`` being the replica's served model (TensorRT-LLM's ``ensemble``, usually), with
the body ``gateway.adapters.triton.request`` makes; ``gateway.adapters.triton.answer`` reads the
answer. ``/embeddings`` and ``/responses`` are refused.

Health: ``GET /v2/health/ready``. Load: Triton's Prometheus page is on its metrics port (8002), so
replicas set ``metrics_url``; ``gateway.adapters.triton.load`` reads it.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

import msgspec

from gateway.adapters.base import Adapter, Exchange
from gateway.adapters.load import ReplicaLoad
from gateway.adapters.shapes import OpenAIAnswer
from gateway.adapters.triton.answer import Reply
from gateway.adapters.triton.load import parse_triton_metrics
from gateway.adapters.triton.request import (
    DEFAULT_COMPLETION_MAX_TOKENS,
    chat_text,
    completion_text,
    ensemble_inputs,
)
from gateway.errors import InvalidRequest

__all__ = ["TritonAdapter"]


class TritonAdapter(Adapter):
    """Triton's generate extension with TensorRT-LLM's ``ensemble`` inputs."""

    kind: ClassVar[str] = "triton"
    health_path: ClassVar[str] = "/v2/health/ready"
    metrics_path: ClassVar[str] = "/metrics"
    """On Triton's metrics port (8002), not the HTTP port: replicas set ``metrics_url``."""

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        if path == "/chat/completions":
            chat, default = True, None
            text = chat_text(body, self.chat_template)
        elif path == "/completions":
            chat, default = False, DEFAULT_COMPLETION_MAX_TOKENS
            text = completion_text(body)
        else:
            raise InvalidRequest(
                f"{path} is not available for this model: its server (Triton's generate API) "
                "serves chat and text completions only."
            )
        native, max_tokens, stops = ensemble_inputs(body, text, default_max_tokens=default, stream=stream)
        model = quote(str(body.get("model", "")), safe="")
        route = "generate_stream" if stream else "generate"
        reply = Reply(OpenAIAnswer(str(body.get("model", "")), chat=chat), text, max_tokens, stops)
        url = f"{root}/v2/models/{model}/{route}"
        return Exchange(url, msgspec.json.encode(native), reply, stream)

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        return parse_triton_metrics(page)
