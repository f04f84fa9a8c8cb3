"""What the handlers share: the served models (each engine None while it loads), the embedder, the
metrics, the names."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from backends.engine.stats import EngineStats
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import ModelNotFound, NotReady
from backends.serving.metrics import ModelMetrics, ServerMetrics
from backends.serving.tracing import EngineTracer


class EmbedderLike(Protocol):
    """``backends.embedder.Embedder``: texts in, L2-normalised vectors and the token count out."""

    model_name: str

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]: ...


@dataclass
class ServedModel:
    """One engine (one copy of the weights, one KV pool, one scheduler queue) and the names it answers
    to: the first is the one its responses and metrics carry, the others are aliases."""

    names: tuple[str, ...]
    metrics: ModelMetrics
    engine: AsyncEngineLike | None = None
    factory: Callable[[], AsyncEngineLike] | None = None
    """Builds the engine in a worker thread after the app starts (None: ``engine`` is given ready)."""

    @property
    def name(self) -> str:
        return self.names[0]

    def read_stats(self) -> EngineStats | None:
        if self.engine is None:
            return None
        return self.engine.stats()


@dataclass
class ServingState:
    """The per-app state handlers read; each model's ``engine`` is set once its weights are loaded."""

    models: list[ServedModel]
    """In the order given; the first serves requests that name no model."""
    metrics: ServerMetrics
    embedder: EmbedderLike | None = None
    load_error: str | None = None
    """Why loading an engine failed, if one did (then /health and /ready answer 503)."""
    created_s: int = field(default_factory=lambda: int(time.time()))
    tracer: EngineTracer | None = None
    """Request traces (None: tracing off)."""

    @property
    def is_ready(self) -> bool:
        return all(m.engine is not None for m in self.models)

    def served(self, model: str | None) -> ServedModel:
        """The model a request names (None: the first); 404 for a name nobody serves."""
        if model is None:
            return self.models[0]
        for served in self.models:
            if model in served.names:
                return served
        for served in self.models:  # the engine's own model name is accepted too
            if served.engine is not None and model == served.engine.engine.model_name:
                return served
        raise ModelNotFound(model)

    def require_ready(self) -> list[ServedModel]:
        """Every model once all are loaded; until then 503 ``model_not_ready`` (the load error, if one
        failed)."""
        if not self.is_ready:
            raise NotReady(self.load_error or "The model is still loading.")
        return self.models

    def require_engine(self, model: str | None) -> tuple[ServedModel, AsyncEngineLike]:
        """The model a request names and its engine; 404 for another model, 503 while it loads."""
        served = self.served(model)
        if served.engine is None:
            raise NotReady(self.load_error or "The model is still loading.")
        return served, served.engine

    def require_embedder(self, model: str | None) -> EmbedderLike:
        """The embedder serving ``model`` (None means the default embedding model)."""
        if self.embedder is None or (model is not None and model != self.embedder.model_name):
            raise ModelNotFound(model or "embedding model")
        return self.embedder
