"""``OllamaAdapter``: which Ollama route each OpenAI path goes to, and Ollama's health and load pages.

Routes (``base_url`` ``http://h:11434/v1`` -> server root ``http://h:11434``):

- ``/chat/completions`` -> ``POST /api/chat`` (``messages``; ``message.content`` in answers);
- ``/completions`` -> ``POST /api/generate`` with ``raw: true`` (OpenAI completions apply no chat
  template), ``response`` in answers;
- ``/embeddings`` -> ``POST /api/embed`` with ``truncate: false`` (OpenAI refuses an input longer
  than the model's context; Ollama would cut it silently);
- ``/responses``: refused (400).

The bodies are ``gateway.adapters.ollama.request``'s, the answers read by
``gateway.adapters.ollama.answer``.

Health: ``GET /api/version``. Load: ``GET /api/ps`` lists the models loaded in memory; Ollama
publishes no queue or slot figures, so an empty list (the next request pays a cold load) reads as
one waiting request, a loaded model as none (``ReplicaLoad(1, 0, 0)`` / ``ReplicaLoad(0, 0, 0)``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from gateway.adapters.base import Adapter, Exchange
from gateway.adapters.load import ReplicaLoad
from gateway.adapters.ollama.answer import Embeddings, Generation
from gateway.adapters.ollama.request import chat_request, completion_request, embedding_request
from gateway.errors import InvalidRequest

__all__ = ["OllamaAdapter"]

_encode = msgspec.json.encode


class OllamaAdapter(Adapter):
    """Ollama's ``/api/chat``, ``/api/generate`` and ``/api/embed``; health ``/api/version``, load
    ``/api/ps`` (the ``gateway.adapters.ollama`` modules' docstrings have the mapping)."""

    kind: ClassVar[str] = "ollama"
    health_path: ClassVar[str] = "/api/version"
    metrics_path: ClassVar[str] = "/api/ps"

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        model = body["model"]
        if path == "/chat/completions":
            native = chat_request(body, stream)
            url = root + "/api/chat"
            translator: Generation | Embeddings = Generation(
                model, chat=True, num_predict=native["options"].get("num_predict")
            )
        elif path == "/completions":
            native = completion_request(body, stream)
            url = root + "/api/generate"
            translator = Generation(model, chat=False, num_predict=native["options"]["num_predict"])
        elif path == "/embeddings":
            native = embedding_request(body)
            url = root + "/api/embed"
            translator = Embeddings(model, as_base64=body.get("encoding_format") == "base64")
            stream = False
        else:
            raise InvalidRequest(
                f"Ollama replicas do not serve {path}; use /v1/chat/completions.", code="unsupported_endpoint"
            )
        return Exchange(url, _encode(native), translator, stream)

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        """``/api/ps``: nothing loaded is one waiting request (a cold load ahead), a loaded model none;
        None for a page that is not ``{"models": [...]}``."""
        try:
            document = msgspec.json.decode(page)
        except msgspec.DecodeError:
            return None
        if not isinstance(document, dict) or "models" not in document:
            return None
        models = document["models"]
        if models is None:
            models = []  # an empty Go slice that was never made
        if not isinstance(models, list):
            return None
        return ReplicaLoad(num_waiting=0.0 if models else 1.0, num_running=0.0, kv_cache_usage=0.0)
