"""``POST /v1/completions``: a text prompt (or token ids) continued, plain or streamed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.response import Stream

from backends.engine.outputs import CompletionOutput, Logprob, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.endpoint import MIN_LOGPROB, serve_endpoint, wants_usage
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import EngineFailed
from backends.serving.params import asks_for_no_tokens, compile_structured, completion_params
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
from backends.serving.stream import DONE, SSE_HEADERS, ChunkMaker, DeltaCursor, usage_of
from backends.serving.tracing import RequestTrace
from backends.serving.unsupported import refuse_unsupported


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


class CompletionEndpoint:
    """The text-completion pieces of the shared handler (``endpoint.serve_endpoint``)."""

    request_type = CompletionRequest
    id_prefix = "cmpl"
    prompt_param = "prompt"

    async def prepare(
        self, body: CompletionRequest, engine: AsyncEngineLike
    ) -> tuple[list[int], SamplingParams]:
        refuse_unsupported(body)  # before anything is built or queued
        params = completion_params(body)
        await compile_structured(engine, body, params)  # a bad schema is a 400 before anything is queued
        tokenizer = engine.engine.tokenizer
        prompt_ids = await completion_prompt_ids(tokenizer, "" if body.prompt is None else body.prompt)
        if not prompt_ids:  # no prompt: a new document, as OpenAI's default prompt <|endoftext|> starts one
            start_id = getattr(tokenizer, "bos_token_id", None)
            prompt_ids = [tokenizer.eos_token_id if start_id is None else start_id]
        return prompt_ids, params

    def answer_without_engine(
        self, request_id: str, body: CompletionRequest, num_prompt_tokens: int, model: str
    ) -> Response[Any] | None:
        return _no_tokens(request_id, body, num_prompt_tokens, model) if asks_for_no_tokens(body) else None

    def response(
        self, request_id: str, created: int, model: str, body: CompletionRequest, last: RequestOutput
    ) -> bytes:
        want_logprobs = body.logprobs is not None
        completion = Completion(
            id=request_id,
            created=created,
            model=model,
            choices=[_choice(c, want_logprobs) for c in last.outputs],
            usage=usage_of(last),
        )
        return encoder.encode(completion)

    def chunk_maker(self, request_id: str, created: int, model: str, body: CompletionRequest) -> ChunkMaker:
        return _chunk_maker(request_id, created, model, body.logprobs is not None)

    def usage_maker(
        self, request_id: str, created: int, model: str, body: CompletionRequest
    ) -> Callable[[Usage], bytes] | None:
        return _usage_maker(request_id, created, model) if wants_usage(body) else None


COMPLETION = CompletionEndpoint()


async def create_completion(
    state: ServingState, request: Request[Any, Any, Any], trace: RequestTrace | None = None
) -> Response[Any]:
    return await serve_endpoint(COMPLETION, state, request, trace)


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
        index=output.index,
        text=output.text,
        logprobs=logprobs,
        finish_reason=output.finish_reason,
        stop_reason=output.stop_reason,
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
            index=output.index,
            text=text,
            logprobs=logprobs,
            finish_reason=output.finish_reason,
            stop_reason=output.stop_reason,
        )
        return encoder.encode(Completion(id=request_id, created=created, model=model, choices=[choice]))

    return make_chunk


def _usage_maker(request_id: str, created: int, model: str) -> Callable[[Usage], bytes]:
    def make_usage_chunk(usage: Usage) -> bytes:
        return encoder.encode(
            Completion(id=request_id, created=created, model=model, choices=[], usage=usage)
        )

    return make_usage_chunk
