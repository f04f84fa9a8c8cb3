"""``kind: openai`` (the default) and ``kind: vllm``: the OpenAI API as it is.

Both send the request unchanged to ``base_url`` + path and read vLLM's metric names for load
(``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``), which
other OpenAI servers simply do not have (then ``load_aware`` falls back to in-flight counts). ``vllm``
says what the replica is, for the console, metrics and docs; it behaves the same.
"""

from __future__ import annotations

from typing import ClassVar

from gateway.adapters.base import Adapter

__all__ = ["OpenAIAdapter", "VllmAdapter"]


class OpenAIAdapter(Adapter):
    """Any OpenAI-compatible server."""

    kind: ClassVar[str] = "openai"


class VllmAdapter(Adapter):
    """vLLM's OpenAI server: ``GET /health``, load from ``/metrics``."""

    kind: ClassVar[str] = "vllm"
