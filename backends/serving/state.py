"""What the handlers share: the engine (None while it loads), the embedder, the metrics, the names."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import ModelNotFound, NotReady
from backends.serving.metrics import ServerMetrics
from backends.serving.tracing import EngineTracer


class EmbedderLike(Protocol):
    """``backends.embedder.Embedder``: texts in, L2-normalised vectors and the token count out."""

    model_name: str

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]: ...


@dataclass
class ServingState:
    """The per-app state handlers read; ``engine`` is set once the weights are loaded."""

    served_model_name: str
    """The name clients put in ``model`` (the engine's own model name is accepted too)."""
    metrics: ServerMetrics
    engine: AsyncEngineLike | None = None
    embedder: EmbedderLike | None = None
    load_error: str | None = None
    """Why loading the engine failed, if it did (then /health and /ready answer 503)."""
    created_s: int = field(default_factory=lambda: int(time.time()))
    tracer: EngineTracer | None = None
    """Request traces (None: tracing off)."""

    @property
    def is_ready(self) -> bool:
        return self.engine is not None

    def model_names(self) -> set[str]:
        names = {self.served_model_name}
        if self.engine is not None:
            names.add(self.engine.engine.model_name)
        return names

    def require_ready(self) -> AsyncEngineLike:
        """The engine once loaded; until then 503 ``model_not_ready`` (the load error, if it failed)."""
        if self.engine is None:
            raise NotReady(self.load_error or "The model is still loading.")
        return self.engine

    def require_engine(self, model: str | None) -> AsyncEngineLike:
        """The engine serving ``model`` (None means the default); 404 for another model, 503 while loading."""
        if model is not None and model not in self.model_names():
            raise ModelNotFound(model)
        return self.require_ready()

    def require_embedder(self, model: str | None) -> EmbedderLike:
        """The embedder serving ``model`` (None means the default embedding model)."""
        if self.embedder is None or (model is not None and model != self.embedder.model_name):
            raise ModelNotFound(model or "embedding model")
        return self.embedder
