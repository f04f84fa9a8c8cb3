"""The one handler shape of the generating endpoints (chat and text completions).

``serve_endpoint`` is the shared path: decode the body, build the prompt and sampling parameters, check
the context, open a ``Generation`` and answer with one JSON body or an SSE stream. What differs between
the endpoints is an ``Endpoint``: how its prompt and parameters are built, whether it can answer without
the engine, and the shape of its response, chunks and usage chunk (``chat.py``, ``completions.py``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from litestar import Request, Response
from litestar.response import Stream

from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.generation import Generation, last_output, until_disconnect
from backends.serving.params import check_context_length, check_logit_bias, decode_request
from backends.serving.protocol import ChatCompletionRequest, CompletionRequest, Usage
from backends.serving.state import ServingState
from backends.serving.stream import SSE_HEADERS, ChunkMaker, sse_events
from backends.serving.tracing import RequestTrace

Body = TypeVar("Body", ChatCompletionRequest, CompletionRequest)

MIN_LOGPROB = -9999.0  # JSON has no -inf


class Endpoint(Protocol, Generic[Body]):
    """What one generating endpoint adds to the shared path."""

    request_type: type[Body]
    id_prefix: str
    """The response id is ``{id_prefix}-{uuid4 hex}``."""
    prompt_param: str
    """The request field the prompt is in (``messages``, ``prompt``): what a too-long prompt's 400 names."""

    async def prepare(self, body: Body, engine: AsyncEngineLike) -> tuple[list[int], SamplingParams]:
        """The prompt's token ids and the request's sampling parameters."""
        ...

    def answer_without_engine(
        self, request_id: str, body: Body, num_prompt_tokens: int, model: str
    ) -> Response[Any] | None:
        """The whole response when the request needs no generation (None: run the engine)."""
        ...

    def response(self, request_id: str, created: int, model: str, body: Body, last: RequestOutput) -> bytes:
        """The JSON body of a plain (not streamed) response from the request's final output."""
        ...

    def chunk_maker(self, request_id: str, created: int, model: str, body: Body) -> ChunkMaker: ...

    def usage_maker(
        self, request_id: str, created: int, model: str, body: Body
    ) -> Callable[[Usage], bytes] | None:
        """The stream's usage chunk, when ``stream_options.include_usage`` asks for one."""
        ...


async def serve_endpoint(
    endpoint: Endpoint[Body],
    state: ServingState,
    request: Request[Any, Any, Any],
    trace: RequestTrace | None = None,
) -> Response[Any]:
    """Answer one request to ``endpoint``: plain JSON, or SSE when it asks to stream."""
    arrival_s = time.perf_counter()
    body = decode_request(await request.body(), endpoint.request_type)
    served, engine = state.require_engine(body.model)
    prompt_ids, params = await endpoint.prepare(body, engine)
    check_context_length(len(prompt_ids), params, engine.engine.max_model_len, endpoint.prompt_param)
    check_logit_bias(params, engine.engine.model_config.vocab_size)
    request_id = f"{endpoint.id_prefix}-{uuid.uuid4().hex}"
    model = body.model or served.name
    answer = endpoint.answer_without_engine(request_id, body, len(prompt_ids), model)
    if answer is not None:
        if trace is not None:
            trace.describe(model, body, bool(body.stream))
            trace.finish(None, model=model)
        return answer
    generation = Generation(
        engine,
        request_id,
        prompt_ids,
        params,
        metrics=served.metrics,
        cache_salt=body.cache_salt,
        priority=body.priority,
        arrival_s=arrival_s,
        trace=trace,
    )
    created = int(time.time())
    if trace is not None:
        trace.describe(model, body, bool(body.stream))
    headers = {"X-Request-Id": request_id}
    if body.stream:
        try:
            await until_disconnect(request.receive, generation.open())
        except BaseException:
            await generation.aclose()
            raise
        return Stream(
            sse_events(
                generation,
                endpoint.chunk_maker(request_id, created, model, body),
                endpoint.usage_maker(request_id, created, model, body),
            ),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **headers},
        )
    try:
        last = await until_disconnect(request.receive, last_output(generation))
    finally:
        await generation.aclose()
    content = endpoint.response(request_id, created, model, body, last)
    return Response(content, media_type="application/json", headers=headers)


def wants_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """The stream ends with a usage chunk (``stream_options.include_usage``)."""
    return body.stream_options is not None and bool(body.stream_options.include_usage)
