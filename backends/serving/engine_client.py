"""The shape of the engine the server drives (``backends.engine.AsyncLLMEngine`` has it).

Declared as Protocols so the HTTP layer is tested against an in-memory twin as well as the real engine,
and so importing the server never needs torch until an engine is built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams


class TokenizerLike(Protocol):
    """The tokenizer calls the server makes (prompt rendering and length checks)."""

    eos_token_id: int

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> str: ...


class EngineCoreLike(Protocol):
    """The synchronous engine's attributes the server reads."""

    tokenizer: Any
    model_name: str
    max_model_len: int


class EngineStatsLike(Protocol):
    """``EngineStats``: a snapshot read at every /metrics scrape."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_blocks_total: int
    num_blocks_free: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    num_generated_tokens: int
    num_prompt_tokens: int


class AsyncEngineLike(Protocol):
    """``AsyncLLMEngine``: one background step loop, one async iterator of outputs per request."""

    engine: Any

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]: ...

    def stats(self) -> Any: ...
