"""The engine's OpenAI-compatible HTTP app: ``create_app(engine, ...) -> Litestar``.

Routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/models``, ``/health``
(the process is alive), ``/ready`` (the weights are loaded), ``/metrics`` (vLLM's metric names).
The engine is either given ready-made or built by ``engine_factory`` in a worker thread after the app
starts, so the port answers while the weights load: ``/ready`` says 503, and ``/v1/models`` and the
completions answer 503 ``model_not_ready`` with Retry-After. Every error is rendered in OpenAI's shape
by one handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException

from backends.model_loading import LOADING
from backends.serving.chat import create_chat_completion
from backends.serving.completions import create_completion
from backends.serving.embeddings import create_embeddings
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import HTTPError, ModelNotFound, ServingError
from backends.serving.metrics import CONTENT_TYPE, ServerMetrics
from backends.serving.protocol import ModelCard, ModelList, encoder
from backends.serving.state import EmbedderLike, ServedModel, ServingState
from backends.serving.tracing import EngineTracer, RequestTrace

log = logging.getLogger(__name__)

T = TypeVar("T")
TRACE_HEADERS = ("traceparent", "tracestate")
"""W3C trace context, echoed untouched on the response (the request's span continues it)."""


@dataclass(frozen=True)
class ModelSpec:
    """One engine the app serves and the names it answers to (the first is its own; the others are
    aliases that share its weights, KV pool and queue). Give the engine ready-made or a factory that
    builds it in a worker thread after the app starts."""

    names: tuple[str, ...]
    engine: AsyncEngineLike | None = None
    factory: Callable[[], AsyncEngineLike] | None = None

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a served model needs at least one name")
        if (self.engine is None) == (self.factory is None):
            raise ValueError("pass exactly one of engine and factory")


def create_app(
    engine: AsyncEngineLike | None = None,
    *,
    engine_factory: Callable[[], AsyncEngineLike] | None = None,
    models: Sequence[ModelSpec] = (),
    embedder: EmbedderLike | None = None,
    load_embedder: bool = False,
    served_model_name: str | None = None,
    tracer: EngineTracer | None = None,
) -> Litestar:
    """The app serving ``engine`` (started and stopped with the app) or the one ``engine_factory`` builds,
    or every engine in ``models`` (several models in one process; the first serves requests that name
    none).

    ``embedder`` serves /v1/embeddings; with ``load_embedder`` its weights load at start-up, else on
    first use. ``tracer`` traces requests (default: as the ``OTEL_*`` environment says; off without it).
    """
    if engine is not None or engine_factory is not None:
        if models:
            raise ValueError("pass models, or one engine / engine_factory, not both")
        if served_model_name is None:
            if engine is None:
                raise ValueError("served_model_name is required with engine_factory")
            served_model_name = engine.engine.model_name
        models = [ModelSpec((served_model_name,), engine=engine, factory=engine_factory)]
    elif not models:
        raise ValueError("pass exactly one of engine and engine_factory, or models")
    names = [name for spec in models for name in spec.names]
    if len(set(names)) != len(names):
        raise ValueError(f"a model name is served twice: {names}")
    metrics = ServerMetrics()
    served: list[ServedModel] = []
    for spec in models:
        model = ServedModel(spec.names, metrics.model(spec.names[0]), factory=spec.factory)
        metrics.watch(model.name, model.read_stats)
        served.append(model)
    state = ServingState(models=served, metrics=metrics, embedder=embedder)
    tracer = tracer or EngineTracer.from_env()
    state.tracer = tracer if tracer.enabled else None
    ready_made = [(model, spec.engine) for model, spec in zip(served, models, strict=True) if spec.engine]

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[None]] = []
        for model, ready in ready_made:
            await ready.start()
            model.engine = ready
        if any(model.factory is not None for model in served):
            tasks.append(asyncio.create_task(_load_engines(state)))
        load = getattr(embedder, "load", None)
        if load_embedder and load is not None:
            tasks.append(asyncio.create_task(_load_embedder(load)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for model in served:
                if model.engine is not None:
                    await model.engine.stop()

    def with_trace(request: Request[Any, Any, Any], response: Response[Any]) -> Response[Any]:
        for name in TRACE_HEADERS:
            value = request.headers.get(name)
            if value is not None:
                response.headers[name] = value
        return response

    def start_trace(request: Request[Any, Any, Any], operation: str) -> RequestTrace | None:
        return state.tracer.start(request.headers, operation, request.url.path) if state.tracer else None

    @post("/v1/chat/completions", status_code=200)
    async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
        trace = start_trace(request, "chat")
        try:
            return with_trace(request, await create_chat_completion(state, request, trace))
        except BaseException as exc:
            if trace is not None:
                trace.fail(exc)
            raise

    @post("/v1/completions", status_code=200)
    async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
        trace = start_trace(request, "text_completion")
        try:
            return with_trace(request, await create_completion(state, request, trace))
        except BaseException as exc:
            if trace is not None:
                trace.fail(exc)
            raise

    @post("/v1/embeddings", status_code=200)
    async def embeddings(request: Request[Any, Any, Any]) -> Response[Any]:
        return with_trace(request, await create_embeddings(state, request))

    @get("/v1/models")
    async def list_models() -> Response[Any]:
        state.require_ready()  # clients and balancers wait on /v1/models: 200 only once every model serves
        cards = _model_cards(state)
        return Response(encoder.encode(ModelList(data=cards)), media_type="application/json")

    @get("/v1/models/{model_id:path}")
    async def retrieve_model(model_id: str) -> Response[Any]:
        state.require_ready()  # before the 404: the engine's own model name is known once loaded
        for card in _model_cards(state):
            if card.id == model_id.lstrip("/"):
                return Response(encoder.encode(card), media_type="application/json")
        raise ModelNotFound(model_id.lstrip("/"))

    @get("/health")
    async def health() -> Response[Any]:
        if state.load_error is not None:
            return _status(503, "failed", state.load_error)
        return _status(200, "ok")

    @get("/ready")
    async def ready() -> Response[Any]:
        if state.load_error is not None:
            return _status(503, "failed", state.load_error)
        return _status(200, "ready") if state.is_ready else _status(503, "loading")

    @get("/metrics")
    async def prometheus_metrics() -> Response[Any]:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    return Litestar(
        route_handlers=[
            chat_completions,
            completions,
            embeddings,
            list_models,
            retrieve_model,
            health,
            ready,
            prometheus_metrics,
        ],
        lifespan=[lifespan],
        exception_handlers={Exception: _render_error},
        openapi_config=None,
        logging_config=None,
        state=State({"serving": state}),
    )


async def _load_engines(state: ServingState) -> None:
    """Build the engines one after another (loading two models at once only doubles the peak memory
    and halves each one's CPU), in the order given."""
    for model in state.models:
        if model.factory is None:
            continue
        try:
            engine = await asyncio.to_thread(_locked, model.factory)
            await engine.start()
        except Exception as exc:
            log.exception("loading the engine of %s failed", model.name)
            state.load_error = f"The engine of {model.name!r} failed to load: {exc}"
            return
        model.engine = engine
        log.info("engine ready: serving %s", ", ".join(model.names))


def _locked(factory: Callable[[], T]) -> T:
    """``factory()`` while no other model loads (``backends/model_loading.py``)."""
    with LOADING:
        return factory()


async def _load_embedder(load: Callable[[], None]) -> None:
    try:
        await asyncio.to_thread(load)
    except Exception:
        log.exception("loading the embedding model failed; /v1/embeddings will retry on use")


def _model_cards(state: ServingState) -> list[ModelCard]:
    cards = []
    for model in state.models:
        assert model.engine is not None
        max_model_len = model.engine.engine.max_model_len
        for name in model.names:
            card = ModelCard(id=name, created=state.created_s, max_model_len=max_model_len, root=model.name)
            cards.append(card)
    if state.embedder is not None:
        cards.append(ModelCard(id=state.embedder.model_name, created=state.created_s))
    return cards


def _status(status_code: int, status: str, detail: str | None = None) -> Response[Any]:
    body: dict[str, str] = {"status": status}
    if detail is not None:
        body["detail"] = detail
    return Response(encoder.encode(body), status_code=status_code, media_type="application/json")


def _render_error(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The one renderer: every failure leaves in OpenAI's error shape."""
    if not isinstance(exc, ServingError):
        exc = _translate(exc)
    return Response(
        exc.to_json(), status_code=exc.status_code, media_type="application/json", headers=exc.headers
    )


def _translate(exc: Exception) -> ServingError:
    if isinstance(exc, HTTPException):  # Litestar's own: unknown route, wrong method, body too large
        allow = (exc.headers or {}).get("allow")  # a 405 names the route's methods (RFC 9110)
        headers = {"Allow": allow} if exc.status_code == 405 and allow else None
        return HTTPError(str(exc.detail), status_code=exc.status_code, headers=headers)
    log.error("unhandled error", exc_info=exc)
    return ServingError("The server had an error while processing your request.")
