"""OpenAI wire types (msgspec Structs) for the engine server.

Requests accept and ignore unknown fields (OpenAI adds fields often); the vLLM extras the engine
understands (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``,
``priority``, ``cache_salt``) are declared. Responses are declared field by field so they encode
exactly as OpenAI's; fields left ``UNSET`` are left out of the JSON, as OpenAI leaves them out.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

# ---------------------------------------------------------------------------------------------- requests


class StreamOptions(msgspec.Struct):
    """``stream_options``: ``include_usage`` adds a final chunk with ``choices: []`` and the usage."""

    include_usage: bool = False


class ContentPart(msgspec.Struct):
    """One part of a message's list content; only ``type: "text"`` parts are served."""

    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    """One chat message; ``content`` is a string, a list of parts, or null (assistant tool calls)."""

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None


class _SamplingFields(msgspec.Struct, kw_only=True):
    """Fields shared by chat and text completions (OpenAI's plus vLLM's extras)."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # vLLM extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    priority: int = 0
    cache_salt: str | None = None


class ChatCompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True


class CompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/completions``; ``prompt`` is a string, a list of token ids, or a one-string list."""

    prompt: str | list[Any]
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``; ``input`` is a string or a list of strings."""

    input: str | list[Any]
    model: str | None = None
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None


# --------------------------------------------------------------------------------------------- responses


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int = 0


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(msgspec.Struct):
    content: list[TokenLogprob] | None


class AssistantMessage(msgspec.Struct):
    role: str
    content: str | None


class ChatChoice(msgspec.Struct):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(msgspec.Struct):
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET


class ChatChunkChoice(msgspec.Struct):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | UnsetType = UNSET


class CompletionLogprobs(msgspec.Struct):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str | None


class Completion(msgspec.Struct, kw_only=True):
    """A text completion, and also each chunk of a streamed one (OpenAI uses one shape for both)."""

    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType = UNSET


class ModelCard(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "switchyard"
    max_model_len: int | UnsetType = UNSET


class ModelList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[ModelCard]


class Embedding(msgspec.Struct, kw_only=True):
    object: str = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


encoder = msgspec.json.Encoder()
"""The one JSON encoder of every response body and stream chunk."""
