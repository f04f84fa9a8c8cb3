"""Backend kinds: one adapter per inference server the gateway speaks to natively.

``build_adapter(kind, chat_template=...)`` gives a replica's adapter (``gateway.adapters.base``):
``openai``, ``vllm`` and ``sortyard`` (the reference engine) send the OpenAI request as it is;
``tgi``, ``triton``, ``ollama`` and ``llamacpp`` turn it into the server's own API where its OpenAI
mode is missing or worse, and read its health and load pages. docs/backends.md has each kind's
mapping. ``RESPONSES_NATIVE`` names the kinds whose servers have their own ``/v1/responses``; the
others serve it over chat (``gateway.adapters.responses.ResponsesOverChat``).
"""

from __future__ import annotations

from typing import Literal

from gateway.adapters.base import Adapter, Exchange, TranslatedResponse
from gateway.adapters.llamacpp import LlamaCppAdapter
from gateway.adapters.load import ReplicaLoad, parse_vllm_metrics
from gateway.adapters.ollama import OllamaAdapter
from gateway.adapters.openai import OpenAIAdapter, SortyardAdapter, VllmAdapter
from gateway.adapters.responses import ResponsesOverChat
from gateway.adapters.tgi import TgiAdapter
from gateway.adapters.triton import TritonAdapter

__all__ = [
    "RESPONSES_NATIVE",
    "RESPONSES_NATIVE_ALLOWED",
    "Adapter",
    "ChatTemplate",
    "Exchange",
    "Kind",
    "ReplicaLoad",
    "ResponsesMode",
    "ResponsesOverChat",
    "TranslatedResponse",
    "build_adapter",
    "parse_vllm_metrics",
]

Kind = Literal["openai", "vllm", "sortyard", "tgi", "triton", "ollama", "llamacpp"]
ResponsesMode = Literal["native", "chat"]
RESPONSES_NATIVE = frozenset({"openai", "vllm"})
"""Kinds whose servers serve ``/v1/responses`` themselves (OpenAI's and vLLM's); by default the
others' replicas get it over chat completions."""
RESPONSES_NATIVE_ALLOWED = RESPONSES_NATIVE | {"llamacpp"}
"""Kinds a replica may set ``responses: native`` for (a recent llama.cpp has the route too)."""
ChatTemplate = Literal["chatml", "llama3", "mistral", "plain"]

_ADAPTERS: dict[str, type[Adapter]] = {
    adapter.kind: adapter
    for adapter in (
        OpenAIAdapter,
        VllmAdapter,
        SortyardAdapter,
        TgiAdapter,
        TritonAdapter,
        OllamaAdapter,
        LlamaCppAdapter,
    )
}


def build_adapter(kind: Kind, *, chat_template: ChatTemplate = "chatml") -> Adapter:
    """The adapter for a replica of ``kind``."""
    return _ADAPTERS[kind](chat_template=chat_template)
