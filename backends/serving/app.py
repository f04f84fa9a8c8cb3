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
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException

from backends.serving.chat import create_chat_completion
from backends.serving.completions import create_completion
from backends.serving.embeddings import create_embeddings
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import HTTPError, ModelNotFound, ServingError
from backends.serving.metrics import CONTENT_TYPE, ServerMetrics
from backends.serving.protocol import ModelCard, ModelList, encoder
from backends.serving.state import EmbedderLike, ServingState
from backends.serving.tracing import EngineTracer, RequestTrace

log = logging.getLogger(__name__)

TRACE_HEADERS = ("traceparent", "tracestate")
"""W3C trace context, echoed untouched on the response (the request's span continues it)."""


def create_app(
    engine: AsyncEngineLike | None = None,
    *,
    engine_factory: Callable[[], AsyncEngineLike] | None = None,
    embedder: EmbedderLike | None = None,
    load_embedder: bool = False,
    served_model_name: str | None = None,
    tracer: EngineTracer | None = None,
) -> Litestar:
    """The app serving ``engine`` (started and stopped with the app) or the one ``engine_factory`` builds.

    ``embedder`` serves /v1/embeddings; with ``load_embedder`` its weights load at start-up, else on
    first use. ``tracer`` traces requests (default: as the ``OTEL_*`` environment says; off without it).
    """
    if (engine is None) == (engine_factory is None):
        raise ValueError("pass exactly one of engine and engine_factory")
    if served_model_name is None:
        if engine is None:
            raise ValueError("served_model_name is required with engine_factory")
        served_model_name = engine.engine.model_name
    metrics = ServerMetrics(served_model_name, lambda: _read_stats(state))  # reads `state`, bound below
    state = ServingState(served_model_name=served_model_name, metrics=metrics, embedder=embedder)
    tracer = tracer or EngineTracer.from_env()
    state.tracer = tracer if tracer.enabled else None

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[None]] = []
        if engine is not None:
            await engine.start()
            state.engine = engine
        else:
            tasks.append(asyncio.create_task(_load_engine(state, engine_factory)))  # type: ignore[arg-type]
        load = getattr(embedder, "load", None)
        if load_embedder and load is not None:
            tasks.append(asyncio.create_task(_load_embedder(load)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if state.engine is not None:
                await state.engine.stop()

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
        engine = state.require_ready()  # clients and balancers wait on /v1/models: 200 only once it serves
        cards = _model_cards(state, engine)
        return Response(encoder.encode(ModelList(data=cards)), media_type="application/json")

    @get("/v1/models/{model_id:path}")
    async def retrieve_model(model_id: str) -> Response[Any]:
        engine = state.require_ready()  # before the 404: the engine's own model name is known once loaded
        for card in _model_cards(state, engine):
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


async def _load_engine(state: ServingState, factory: Callable[[], AsyncEngineLike]) -> None:
    try:
        engine = await asyncio.to_thread(factory)
        await engine.start()
    except Exception as exc:
        log.exception("loading the engine failed")
        state.load_error = f"The engine failed to load: {exc}"
        return
    state.engine = engine
    log.info("engine ready: serving %s", state.served_model_name)


async def _load_embedder(load: Callable[[], None]) -> None:
    try:
        await asyncio.to_thread(load)
    except Exception:
        log.exception("loading the embedding model failed; /v1/embeddings will retry on use")


def _read_stats(state: ServingState) -> Any | None:
    if state.engine is None:
        return None
    try:
        return state.engine.stats()
    except Exception:  # a dead engine must not break the scrape
        log.exception("reading engine stats failed")
        return None


def _model_cards(state: ServingState, engine: AsyncEngineLike) -> list[ModelCard]:
    max_model_len = engine.engine.max_model_len
    cards = [ModelCard(id=state.served_model_name, created=state.created_s, max_model_len=max_model_len)]
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
        return HTTPError(str(exc.detail), status_code=exc.status_code)
    log.error("unhandled error", exc_info=exc)
    return ServingError("The server had an error while processing your request.")
