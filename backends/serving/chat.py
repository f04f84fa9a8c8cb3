"""``POST /v1/chat/completions``: messages rendered with the model's chat template, plain or streamed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.response import Stream

from backends.engine.outputs import CompletionOutput, Logprob
from backends.serving.errors import EngineFailed
from backends.serving.generation import Generation, last_output, until_disconnect
from backends.serving.params import chat_params, check_context_length, decode_request
from backends.serving.prompt import chat_prompt_ids
from backends.serving.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChatLogprobs,
    ChatMessage,
    TokenLogprob,
    TopLogprob,
    Usage,
    encoder,
)
from backends.serving.state import ServingState
from backends.serving.stream import SSE_HEADERS, ChunkMaker, DeltaCursor, sse_events, usage_of
from backends.serving.tracing import RequestTrace

MIN_LOGPROB = -9999.0  # JSON has no -inf


def chat_logprobs(entries: list[tuple[Logprob, list[Logprob]]]) -> ChatLogprobs:
    return ChatLogprobs(
        content=[
            TokenLogprob(
                token=chosen.decoded,
                logprob=max(chosen.logprob, MIN_LOGPROB),
                bytes=list(chosen.decoded.encode()),
                top_logprobs=[
                    TopLogprob(
                        token=t.decoded, logprob=max(t.logprob, MIN_LOGPROB), bytes=list(t.decoded.encode())
                    )
                    for t in top
                ],
            )
            for chosen, top in entries
        ]
    )


async def create_chat_completion(
    state: ServingState, request: Request[Any, Any, Any], trace: RequestTrace | None = None
) -> Response[Any]:
    arrival_s = time.perf_counter()
    body = decode_request(await request.body(), ChatCompletionRequest)
    served, engine = state.require_engine(body.model)
    params = chat_params(body)
    # a turn ends at the template's end-of-turn token too (Gemma's <end_of_turn>), as vLLM stops on
    # every eos id of generation_config; a base model's file names only <eos>
    end_of_turn = getattr(engine.engine.tokenizer, "chat_stop_token_ids", ())
    params.stop_token_ids = [*params.stop_token_ids, *end_of_turn]
    prompt_ids = await chat_prompt_ids(
        engine.engine.tokenizer,
        [_as_template_role(m) for m in body.messages],
        add_generation_prompt=body.add_generation_prompt,
    )
    check_context_length(len(prompt_ids), params, engine.engine.max_model_len)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
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
    if body.stream:
        try:
            await until_disconnect(request.receive, generation.open())
        except BaseException:
            await generation.aclose()
            raise
        return Stream(
            sse_events(
                generation,
                _chunk_maker(request_id, created, model, body),
                _usage_maker(request_id, created, model, body),
            ),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **headers},
        )
    try:
        last = await until_disconnect(request.receive, last_output(generation))
    finally:
        await generation.aclose()
    completion = ChatCompletion(
        id=request_id,
        created=created,
        model=model,
        choices=[_choice(c, bool(body.logprobs)) for c in last.outputs],
        usage=usage_of(last),
    )
    return Response(encoder.encode(completion), media_type="application/json", headers=headers)


def _as_template_role(message: ChatMessage) -> ChatMessage:
    """OpenAI's deprecated ``function`` role is a tool result: templates know it as ``tool``."""
    if message.role != "function":
        return message
    return ChatMessage(role="tool", content=message.content, name=message.name)


def _choice(output: CompletionOutput, want_logprobs: bool) -> ChatChoice:
    if output.finish_reason == "error":
        raise EngineFailed(output.error or "The engine failed on this request.")
    logprobs = chat_logprobs(output.logprobs) if want_logprobs and output.logprobs is not None else None
    return ChatChoice(
        index=output.index,
        message=AssistantMessage(role="assistant", content=output.text),
        logprobs=logprobs,
        finish_reason=output.finish_reason,
    )


def _chunk_maker(request_id: str, created: int, model: str, body: ChatCompletionRequest) -> ChunkMaker:
    want_logprobs = bool(body.logprobs)

    def make_chunk(output: CompletionOutput, text: str, cursor: DeltaCursor) -> bytes:
        start, end = cursor.take_tokens(output)
        delta = ChatDelta(content=text) if cursor.is_started else ChatDelta(role="assistant", content=text)
        logprobs = None
        if want_logprobs and output.logprobs is not None:
            logprobs = chat_logprobs(output.logprobs[start:end])
        choice = ChatChunkChoice(
            index=output.index, delta=delta, logprobs=logprobs, finish_reason=output.finish_reason
        )
        return encoder.encode(
            ChatCompletionChunk(id=request_id, created=created, model=model, choices=[choice])
        )

    return make_chunk


def _usage_maker(
    request_id: str, created: int, model: str, body: ChatCompletionRequest
) -> Callable[[Usage], bytes] | None:
    if body.stream_options is None or not body.stream_options.include_usage:
        return None

    def make_usage_chunk(usage: Usage) -> bytes:
        return encoder.encode(
            ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage)
        )

    return make_usage_chunk
