"""The shape of the engine the server drives (``backends.engine.async_engine.AsyncLLMEngine`` has it).

A Protocol, so the HTTP layer is tested against an in-memory twin (``tests/backends/serving``) as well as
the real engine, and so importing the server never needs torch until an engine is built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.engine.stats import EngineStats


class AsyncEngineLike(Protocol):
    """``AsyncLLMEngine``: one background step loop, one async iterator of outputs per request."""

    engine: Any
    """The synchronous engine: the server reads its ``tokenizer``, ``model_name`` and ``max_model_len``."""

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

    def stats(self) -> EngineStats: ...
