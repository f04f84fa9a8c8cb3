"""``POST /v1/chat/completions``: messages rendered with the model's chat template, plain or streamed.

With ``tools`` the prompt shows them and the reply is read for calls (``tools/``): a plain reply's calls
become ``message.tool_calls``, a stream's become tool-call deltas, and the finish reason is
``tool_calls``; a forced choice (``required``, a named function) constrains the output to calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from msgspec import UNSET, UnsetType

from backends.engine.outputs import CompletionOutput, Logprob, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.endpoint import MIN_LOGPROB, serve_endpoint, wants_usage
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import EngineFailed, InvalidRequest
from backends.serving.params import chat_params, compile_structured
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
    StopReason,
    TokenLogprob,
    ToolCall,
    ToolCallFunction,
    TopLogprob,
    Usage,
    encoder,
)
from backends.serving.state import ServingState
from backends.serving.stream import ChunkMaker, DeltaCursor, usage_of
from backends.serving.tools.grammar import forced_calls
from backends.serving.tools.parser import new_call_id, parse_tool_calls
from backends.serving.tools.spec import parses_tool_calls, tool_request
from backends.serving.tools.stream import ToolCallStream
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
    prompt_param = "messages"

    async def prepare(
        self, body: ChatCompletionRequest, engine: AsyncEngineLike
    ) -> tuple[list[int], SamplingParams]:
        refuse_unsupported(body)  # before anything is built or queued
        tools = tool_request(body)
        params = chat_params(body)
        if tools is not None and tools.is_forced:
            if params.structured is not None:
                raise InvalidRequest(
                    "A forced tool call (tool_choice 'required' or a named function) cannot be combined "
                    "with response_format or structured outputs.",
                    param="tool_choice",
                )
            params.structured = forced_calls(tools)
        await compile_structured(engine, body, params)  # off the event loop; a bad schema is a 400
        # a turn ends at the template's end-of-turn token too (Gemma's <end_of_turn>), as vLLM stops on
        # every eos id of generation_config; a base model's file names only <eos>
        end_of_turn = getattr(engine.engine.tokenizer, "chat_stop_token_ids", ())
        params.stop_token_ids = [*params.stop_token_ids, *end_of_turn]
        prompt_ids = await chat_prompt_ids(
            engine.engine.tokenizer,
            [_as_template_role(m) for m in body.messages],
            add_generation_prompt=body.add_generation_prompt,
            tools=tools,
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
            choices=[_choice(c, body) for c in last.outputs],
            usage=usage_of(last),
        )
        return encoder.encode(completion)

    def chunk_maker(
        self, request_id: str, created: int, model: str, body: ChatCompletionRequest
    ) -> ChunkMaker:
        if parses_tool_calls(body):
            return _tool_chunk_maker(request_id, created, model, bool(body.logprobs), _max_calls(body))
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


def _max_calls(body: ChatCompletionRequest) -> int | None:
    """``parallel_tool_calls: false`` keeps a reply's first call only."""
    return 1 if body.parallel_tool_calls is False else None


def _choice(output: CompletionOutput, body: ChatCompletionRequest) -> ChatChoice:
    if output.finish_reason == "error":
        raise EngineFailed(output.error or "The engine failed on this request.")
    want_logprobs = bool(body.logprobs)
    logprobs = chat_logprobs(output.logprobs) if want_logprobs and output.logprobs is not None else None
    message = AssistantMessage(role="assistant", content=output.text)
    finish_reason = output.finish_reason
    if parses_tool_calls(body):
        reply = parse_tool_calls(output.text, _max_calls(body))
        message = AssistantMessage(role="assistant", content=reply.content)
        if reply.calls:
            message.tool_calls = [
                ToolCall(id=new_call_id(), function=ToolCallFunction(name=c.name, arguments=c.arguments))
                for c in reply.calls
            ]
            finish_reason = _tool_finish_reason(finish_reason)
    return ChatChoice(
        index=output.index,
        message=message,
        logprobs=logprobs,
        finish_reason=finish_reason,
        stop_reason=output.stop_reason,
    )


def _tool_finish_reason(finish_reason: str | None) -> str | None:
    """``tool_calls`` for a reply that made calls and ended by itself; a cut-off one stays ``length``."""
    return "tool_calls" if finish_reason == "stop" else finish_reason


def _chunk_stop_reason(output: CompletionOutput) -> StopReason | UnsetType:
    """A chunk's ``stop_reason``: on the one with the finish reason (as vLLM sends it), absent before."""
    return UNSET if output.finish_reason is None else output.stop_reason


def _chunk_maker(request_id: str, created: int, model: str, want_logprobs: bool) -> ChunkMaker:
    def make_chunk(output: CompletionOutput, text: str, cursor: DeltaCursor) -> bytes:
        start, end = cursor.take_tokens(output)
        delta = ChatDelta(content=text) if cursor.is_started else ChatDelta(role="assistant", content=text)
        logprobs = None
        if want_logprobs and output.logprobs is not None:
            logprobs = chat_logprobs(output.logprobs[start:end])
        choice = ChatChunkChoice(
            index=output.index,
            delta=delta,
            logprobs=logprobs,
            finish_reason=output.finish_reason,
            stop_reason=_chunk_stop_reason(output),
        )
        return encoder.encode(
            ChatCompletionChunk(id=request_id, created=created, model=model, choices=[choice])
        )

    return make_chunk


def _tool_chunk_maker(
    request_id: str, created: int, model: str, want_logprobs: bool, max_calls: int | None
) -> ChunkMaker:
    """Chunks of a reply read for tool calls: content and tool-call deltas, one delta a chunk."""
    readers: dict[int, ToolCallStream] = {}

    def make_chunks(output: CompletionOutput, text: str, cursor: DeltaCursor) -> list[bytes]:
        reader = readers.setdefault(output.index, ToolCallStream(max_calls))
        deltas = reader.feed(text)
        finish_reason = None
        if output.finish_reason is not None:
            deltas += reader.finish()
            finish_reason = (
                _tool_finish_reason(output.finish_reason) if reader.num_calls else output.finish_reason
            )
            if not deltas:
                deltas.append(ChatDelta())  # the finish chunk
        chunks = []
        for i, delta in enumerate(deltas):
            if i == 0 and not cursor.is_started:
                delta.role = "assistant"
            logprobs = None
            if i == 0 and want_logprobs and output.logprobs is not None:
                start, end = cursor.take_tokens(output)  # the tokens of held text go with the next chunk
                logprobs = chat_logprobs(output.logprobs[start:end])
            is_last = i == len(deltas) - 1
            choice = ChatChunkChoice(
                index=output.index,
                delta=delta,
                logprobs=logprobs,
                finish_reason=finish_reason if is_last else None,
                stop_reason=_chunk_stop_reason(output) if is_last else UNSET,
            )
            chunks.append(
                encoder.encode(
                    ChatCompletionChunk(id=request_id, created=created, model=model, choices=[choice])
                )
            )
        return chunks

    return make_chunks


def _usage_maker(request_id: str, created: int, model: str) -> Callable[[Usage], bytes]:
    def make_usage_chunk(usage: Usage) -> bytes:
        return encoder.encode(
            ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage)
        )

    return make_usage_chunk
