"""Backend kinds: one adapter per inference server the gateway speaks to natively.

``build_adapter(kind, chat_template=...)`` gives a replica's adapter (``gateway.adapters.base``):
``openai`` and ``vllm`` send the OpenAI request as it is; ``tgi``, ``triton``, ``ollama`` and
``llamacpp`` turn it into the server's own API where its OpenAI mode is missing or worse, and read
its health and load pages. docs/backends.md has each kind's mapping.
"""

from __future__ import annotations

from typing import Literal

from gateway.adapters.base import Adapter, Exchange, TranslatedResponse
from gateway.adapters.llamacpp import LlamaCppAdapter
from gateway.adapters.load import ReplicaLoad, parse_vllm_metrics
from gateway.adapters.ollama import OllamaAdapter
from gateway.adapters.openai import OpenAIAdapter, VllmAdapter
from gateway.adapters.tgi import TgiAdapter
from gateway.adapters.triton import TritonAdapter

__all__ = [
    "Adapter",
    "ChatTemplate",
    "Exchange",
    "Kind",
    "ReplicaLoad",
    "TranslatedResponse",
    "build_adapter",
    "parse_vllm_metrics",
]

Kind = Literal["openai", "vllm", "tgi", "triton", "ollama", "llamacpp"]
ChatTemplate = Literal["chatml", "llama3", "mistral", "plain"]

_ADAPTERS: dict[str, type[Adapter]] = {
    adapter.kind: adapter
    for adapter in (OpenAIAdapter, VllmAdapter, TgiAdapter, TritonAdapter, OllamaAdapter, LlamaCppAdapter)
}


def build_adapter(kind: Kind, *, chat_template: ChatTemplate = "chatml") -> Adapter:
    """The adapter for a replica of ``kind``."""
    return _ADAPTERS[kind](chat_template=chat_template)
