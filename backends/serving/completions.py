"""``POST /v1/completions``: a text prompt (or token ids) continued, plain or streamed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.response import Stream

from backends.engine.outputs import CompletionOutput, Logprob
from backends.serving.chat import MIN_LOGPROB
from backends.serving.errors import EngineFailed
from backends.serving.generation import Generation, last_output, until_disconnect
from backends.serving.params import (
    asks_for_no_tokens,
    check_context_length,
    completion_params,
    decode_request,
)
from backends.serving.prompt import completion_prompt_ids
from backends.serving.protocol import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    PromptTokensDetails,
    Usage,
    encoder,
)
from backends.serving.state import ServingState
from backends.serving.stream import DONE, SSE_HEADERS, ChunkMaker, DeltaCursor, sse_events, usage_of
from backends.serving.tracing import RequestTrace


def completion_logprobs(
    entries: list[tuple[Logprob, list[Logprob]]], first_offset: int
) -> CompletionLogprobs:
    offsets: list[int] = []
    offset = first_offset
    for chosen, _ in entries:
        offsets.append(offset)
        offset += len(chosen.decoded)
    return CompletionLogprobs(
        tokens=[chosen.decoded for chosen, _ in entries],
        token_logprobs=[max(chosen.logprob, MIN_LOGPROB) for chosen, _ in entries],
        top_logprobs=[{t.decoded: max(t.logprob, MIN_LOGPROB) for t in top} for _, top in entries],
        text_offset=offsets,
    )


async def create_completion(
    state: ServingState, request: Request[Any, Any, Any], trace: RequestTrace | None = None
) -> Response[Any]:
    arrival_s = time.perf_counter()
    body = decode_request(await request.body(), CompletionRequest)
    served, engine = state.require_engine(body.model)
    params = completion_params(body)
    tokenizer = engine.engine.tokenizer
    prompt_ids = await completion_prompt_ids(tokenizer, "" if body.prompt is None else body.prompt)
    if not prompt_ids:  # no prompt: a new document, as OpenAI's default prompt <|endoftext|> starts one
        start_id = getattr(tokenizer, "bos_token_id", None)
        prompt_ids = [tokenizer.eos_token_id if start_id is None else start_id]
    check_context_length(len(prompt_ids), params, engine.engine.max_model_len)
    request_id = f"cmpl-{uuid.uuid4().hex}"
    if asks_for_no_tokens(body):
        model = body.model or served.name
        if trace is not None:
            trace.describe(model, body, bool(body.stream))
            trace.finish(None, model=model)
        return _no_tokens(request_id, body, len(prompt_ids), model)
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
    model = body.model or served.name
    if trace is not None:
        trace.describe(model, body, bool(body.stream))
    headers = {"X-Request-Id": request_id}
    want_logprobs = body.logprobs is not None
    if body.stream:
        try:
            await until_disconnect(request.receive, generation.open())
        except BaseException:
            await generation.aclose()
            raise
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return Stream(
            sse_events(
                generation,
                _chunk_maker(request_id, created, model, want_logprobs),
                _usage_maker(request_id, created, model) if include_usage else None,
            ),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **headers},
        )
    try:
        last = await until_disconnect(request.receive, last_output(generation))
    finally:
        await generation.aclose()
    completion = Completion(
        id=request_id,
        created=created,
        model=model,
        choices=[_choice(c, want_logprobs) for c in last.outputs],
        usage=usage_of(last),
    )
    return Response(encoder.encode(completion), media_type="application/json", headers=headers)


def _no_tokens(request_id: str, body: CompletionRequest, num_prompt_tokens: int, model: str) -> Response[Any]:
    """``max_tokens: 0``: each choice empty and finished for length, without running the engine."""
    created = int(time.time())
    logprobs = None
    if body.logprobs is not None:
        logprobs = CompletionLogprobs(tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[])
    choices = [
        CompletionChoice(index=i, text="", logprobs=logprobs, finish_reason="length")
        for i in range(body.n or 1)
    ]
    usage = Usage(
        prompt_tokens=num_prompt_tokens,
        completion_tokens=0,
        total_tokens=num_prompt_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=0),
    )
    headers = {"X-Request-Id": request_id}
    if not body.stream:
        completion = Completion(id=request_id, created=created, model=model, choices=choices, usage=usage)
        return Response(encoder.encode(completion), media_type="application/json", headers=headers)
    events = [
        b"data: "
        + encoder.encode(Completion(id=request_id, created=created, model=model, choices=[c]))
        + b"\n\n"
        for c in choices
    ]
    if body.stream_options is not None and body.stream_options.include_usage:
        usage_chunk = Completion(id=request_id, created=created, model=model, choices=[], usage=usage)
        events.append(b"data: " + encoder.encode(usage_chunk) + b"\n\n")
    events.append(DONE)
    return Stream(events, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})


def _choice(output: CompletionOutput, want_logprobs: bool) -> CompletionChoice:
    if output.finish_reason == "error":
        raise EngineFailed(output.error or "The engine failed on this request.")
    logprobs = None
    if want_logprobs and output.logprobs is not None:
        logprobs = completion_logprobs(output.logprobs, 0)
    return CompletionChoice(
        index=output.index, text=output.text, logprobs=logprobs, finish_reason=output.finish_reason
    )


def _chunk_maker(request_id: str, created: int, model: str, want_logprobs: bool) -> ChunkMaker:
    def make_chunk(output: CompletionOutput, text: str, cursor: DeltaCursor) -> bytes:
        start, end = cursor.take_tokens(output)
        logprobs = None
        if want_logprobs and output.logprobs is not None:
            logprobs = completion_logprobs(output.logprobs[start:end], cursor.num_logprob_chars)
            cursor.num_logprob_chars = (
                logprobs.text_offset[-1] + len(logprobs.tokens[-1])
                if end > start
                else cursor.num_logprob_chars
            )
        choice = CompletionChoice(
            index=output.index, text=text, logprobs=logprobs, finish_reason=output.finish_reason
        )
        return encoder.encode(Completion(id=request_id, created=created, model=model, choices=[choice]))

    return make_chunk


def _usage_maker(request_id: str, created: int, model: str) -> Callable[[Usage], bytes]:
    def make_usage_chunk(usage: Usage) -> bytes:
        return encoder.encode(
            Completion(id=request_id, created=created, model=model, choices=[], usage=usage)
        )

    return make_usage_chunk
