"""OpenAI wire types (msgspec Structs) for the engine server.

Requests accept and ignore unknown fields (OpenAI adds fields often); the vLLM extras the engine
understands (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``,
``priority``, ``cache_salt``) are declared. Tool definitions and ``tool_choice`` are typed ``Any`` and
checked by ``tools/spec.py``, so that a bad one is a 400 naming the field. The fields of features the
engine does not serve (legacy ``functions``, audio, ...) are typed ``Any`` too: ``unsupported.py``
refuses them rather than ignore them. Responses are declared field by field so they encode exactly as
OpenAI's; fields left ``UNSET`` are left out of the JSON, as OpenAI leaves them out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

# ---------------------------------------------------------------------------------------------- requests
# The engine's half of the validation contract: the same bounds as the gateway's gateway/schemas.py
# (OpenAI's API reference; null wherever it says nullable, meaning the default), so that nothing the
# gateway accepts is refused here. tests/reliability/test_validation_contract.py holds both to it.

NumChoices = Annotated[int, msgspec.Meta(ge=1, le=128)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]
NumLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class StreamOptions(msgspec.Struct):
    """``stream_options``: ``include_usage`` adds a final chunk with ``choices: []`` and the usage."""

    include_usage: bool = False


class ContentPart(msgspec.Struct):
    """One part of a message's list content; only ``type: "text"`` parts are served."""

    type: str
    text: str | None = None


class FunctionCall(msgspec.Struct):
    """A call's function: its name and its arguments as JSON text (an object is taken too)."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class MessageToolCall(msgspec.Struct):
    """One tool call of an assistant message in the history."""

    function: FunctionCall
    id: str | None = None
    type: str = "function"


class ChatMessage(msgspec.Struct):
    """One chat message; ``content`` is a string, a list of parts, or null (assistant tool calls)."""

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    """An assistant message's calls (``backends/serving/tools/``)."""
    tool_call_id: str | None = None
    """A ``tool`` message answers the call with this id."""


class _SamplingFields(msgspec.Struct, kw_only=True):
    """Fields shared by chat and text completions (OpenAI's plus vLLM's extras)."""

    model: ModelName | None = None
    """None (or left out) means the served model."""
    temperature: Temperature | None = None
    top_p: Probability | None = None
    """0 is greedy, as temperature 0 is."""
    n: NumChoices | None = None
    stop: NonEmptyStr | list[NonEmptyStr] | None = None
    seed: Seed | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    logit_bias: dict[str, Annotated[float, msgspec.Meta(ge=-100, le=100)]] | None = None
    """Token id (as a string, as JSON keys are) -> bias added to its logit."""
    # vLLM extras
    top_k: int | None = None
    """Unbounded, as vLLM's: 0 and -1 are off, and so is any k at or above the vocabulary (however large:
    the sampler clamps it); below -1 is a 400."""
    min_p: float | None = None
    repetition_penalty: float | None = None
    """Any finite value > 0, as vLLM's (params.py refuses others with a 400 naming it)."""
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    priority: int = 0
    cache_salt: str | None = None
    # structured outputs: read by params.structured_output, so a bad one is a 400 naming the field
    response_format: Any = None
    structured_outputs: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None


class ChatCompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: NumLogprobs | None = None
    add_generation_prompt: bool = True
    # tool calling (backends/serving/tools/): checked there, so a bad one is a 400 naming the field
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    """False: at most one call a reply; null or true: one or more."""
    # legacy function calling: refused by unsupported.refuse_unsupported (send tools instead)
    functions: Any = None
    function_call: Any = None
    # not served: refused by unsupported.refuse_unsupported unless null (or a no-op value)
    modalities: Any = None
    audio: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    web_search_options: Any = None
    moderation: Any = None


class CompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/completions``; ``prompt`` is a string, a list of token ids, or a one-string list.

    A null or empty prompt starts a new document (the model's BOS, else its EOS token, as OpenAI's
    ``<|endoftext|>``)."""

    prompt: str | Annotated[list[Any], msgspec.Meta(min_length=1)] | None
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """16 when null; 0 answers empty choices without running the engine (OpenAI allows it)."""
    logprobs: NumLogprobs | None = None
    echo: bool | None = None
    best_of: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    suffix: str | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``; ``input`` is a string or a list of strings."""

    input: NonEmptyStr | Annotated[list[Any], msgspec.Meta(min_length=1, max_length=2048)]
    model: ModelName | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, msgspec.Meta(ge=1)] | None = None
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


class ToolCallFunction(msgspec.Struct):
    name: str
    arguments: str
    """JSON text."""


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: str = "function"
    function: ToolCallFunction


class AssistantMessage(msgspec.Struct):
    role: str
    content: str | None
    tool_calls: list[ToolCall] | UnsetType = UNSET


StopReason = str | int | None
"""vLLM's ``stop_reason`` beside ``finish_reason: "stop"``: the stop string or ``stop_token_ids`` id that
ended a choice, null for eos and every other end; clients (the gateway's Anthropic adapter) read it to
tell a stop sequence from the end of a turn."""


class ChatChoice(msgspec.Struct):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: StopReason = None


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(msgspec.Struct):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ToolCallDelta(msgspec.Struct, kw_only=True):
    """A piece of a streamed call: the first carries its id, type and name, later ones argument text."""

    index: int
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    function: FunctionDelta


class ChatDelta(msgspec.Struct):
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET


class ChatChunkChoice(msgspec.Struct):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: StopReason | UnsetType = UNSET
    """Sent with the finish reason only, as vLLM sends it."""


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
    stop_reason: StopReason = None


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
    owned_by: str = "sortyard"
    root: str | UnsetType = UNSET
    """The served model an alias shares its weights with (its own name when it is no alias)."""
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
