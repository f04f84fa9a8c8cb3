"""``kind: openai`` (the default), ``kind: vllm`` and ``kind: sortyard``: the OpenAI API as it is.

Both send the request unchanged to ``base_url`` + path and read vLLM's metric names for load
(``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``), which
other OpenAI servers simply do not have (then ``load_aware`` falls back to in-flight counts). ``vllm``
says what the replica is, for the console, metrics and docs; it behaves the same. ``sortyard`` is the
reference engine (``backends/``): OpenAI mode and vLLM's metric names too, but only chat, completions
and embeddings, so its pools serve the Responses API over chat (``gateway.adapters.responses``).
"""

from __future__ import annotations

from typing import ClassVar

from gateway.adapters.base import Adapter

__all__ = ["OpenAIAdapter", "SortyardAdapter", "VllmAdapter"]


class OpenAIAdapter(Adapter):
    """Any OpenAI-compatible server."""

    kind: ClassVar[str] = "openai"


class VllmAdapter(Adapter):
    """vLLM's OpenAI server: ``GET /health``, load from ``/metrics``."""

    kind: ClassVar[str] = "vllm"


class SortyardAdapter(Adapter):
    """The reference engine (``python -m backends.server``): OpenAI mode, load from ``/metrics``."""

    kind: ClassVar[str] = "sortyard"
