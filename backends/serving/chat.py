"""``POST /v1/chat/completions``: messages rendered with the model's chat template, plain or streamed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Request, Response

from backends.engine.outputs import CompletionOutput, Logprob, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.endpoint import MIN_LOGPROB, serve_endpoint, wants_usage
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import EngineFailed
from backends.serving.params import chat_params
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
from backends.serving.stream import ChunkMaker, DeltaCursor, usage_of
from backends.serving.tracing import RequestTrace
from backends.serving.unsupported import refuse_unsupported


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


class ChatEndpoint:
    """The chat pieces of the shared handler (``endpoint.serve_endpoint``)."""

    request_type = ChatCompletionRequest
    id_prefix = "chatcmpl"

    async def prepare(
        self, body: ChatCompletionRequest, engine: AsyncEngineLike
    ) -> tuple[list[int], SamplingParams]:
        refuse_unsupported(body)  # before anything is built or queued
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
        return prompt_ids, params

    def answer_without_engine(
        self, request_id: str, body: ChatCompletionRequest, num_prompt_tokens: int, model: str
    ) -> Response[Any] | None:
        return None  # chat always generates (max_tokens is at least 1)

    def response(
        self, request_id: str, created: int, model: str, body: ChatCompletionRequest, last: RequestOutput
    ) -> bytes:
        completion = ChatCompletion(
            id=request_id,
            created=created,
            model=model,
            choices=[_choice(c, bool(body.logprobs)) for c in last.outputs],
            usage=usage_of(last),
        )
        return encoder.encode(completion)

    def chunk_maker(
        self, request_id: str, created: int, model: str, body: ChatCompletionRequest
    ) -> ChunkMaker:
        return _chunk_maker(request_id, created, model, bool(body.logprobs))

    def usage_maker(
        self, request_id: str, created: int, model: str, body: ChatCompletionRequest
    ) -> Callable[[Usage], bytes] | None:
        return _usage_maker(request_id, created, model) if wants_usage(body) else None


CHAT = ChatEndpoint()


async def create_chat_completion(
    state: ServingState, request: Request[Any, Any, Any], trace: RequestTrace | None = None
) -> Response[Any]:
    return await serve_endpoint(CHAT, state, request, trace)


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


def _chunk_maker(request_id: str, created: int, model: str, want_logprobs: bool) -> ChunkMaker:
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


def _usage_maker(request_id: str, created: int, model: str) -> Callable[[Usage], bytes]:
    def make_usage_chunk(usage: Usage) -> bytes:
        return encoder.encode(
            ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage)
        )

    return make_usage_chunk
