"""OpenAI request shapes, for validation only: the gateway's half of the validation contract.

The body is decoded once into plain Python objects (that is what gets forwarded, unknown fields
and all) and then checked against these structs with ``msgspec.convert``. Only fields whose type
the gateway must trust are declared; everything else passes through to the upstream untouched.

The contract (docs and ``tests/reliability/test_validation_contract.py``): a value is accepted when
OpenAI's API reference accepts it, ``null`` wherever that reference says nullable (it means the
default); a refused value is a 400 ``invalid_request_error`` naming the field in ``param`` with a
non-null ``code``. The reference engine's server (``backends/serving/protocol.py``) declares the same
bounds, so nothing the gateway accepts comes back as the engine's 400.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from gateway.errors import InvalidJSON, InvalidRequest
from gateway.pipeline import Endpoint

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
NumChoices = Annotated[int, msgspec.Meta(ge=1, le=128)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]
NumLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
TokenId = Annotated[int, msgspec.Meta(ge=0)]
TokenIds = Annotated[list[TokenId], msgspec.Meta(min_length=1)]
Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
Stop = NonEmptyStr | list[NonEmptyStr]
"""A stop string (an empty one would match at once) or a list of them; ``[]`` means none."""


class StreamOptions(msgspec.Struct):
    """``stream_options``: ``include_usage`` asks for a last chunk with the usage."""

    include_usage: bool = False


class TextPart(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class ImagePart(msgspec.Struct, tag_field="type", tag="image_url"):
    image_url: dict[str, Any]


class AudioPart(msgspec.Struct, tag_field="type", tag="input_audio"):
    input_audio: dict[str, Any]


class FilePart(msgspec.Struct, tag_field="type", tag="file"):
    file: dict[str, Any]


class RefusalPart(msgspec.Struct, tag_field="type", tag="refusal"):
    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart
"""One part of a message's list content, told apart by ``type`` (OpenAI refuses other types)."""


class Message(msgspec.Struct):
    """One chat message (``name``, ``tool_calls``, ``tool_call_id``, ... pass through unchecked)."""

    role: Role
    content: str | list[ContentPart] | None = None


class _Sampling(msgspec.Struct, kw_only=True):
    """Fields chat and text completions share."""

    model: ModelName
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    n: NumChoices | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: Seed | None = None
    stop: Stop | None = None
    user: str | None = None


class ChatRequest(_Sampling, kw_only=True):
    """``POST /v1/chat/completions``; other fields pass through to the upstream unchecked."""

    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    max_tokens: PosInt | None = None
    max_completion_tokens: PosInt | None = None
    logprobs: bool | None = None
    top_logprobs: NumLogprobs | None = None
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Sampling, kw_only=True):
    """``POST /v1/completions``; other fields pass through to the upstream unchecked."""

    prompt: str | Annotated[list[str | TokenId | TokenIds], msgspec.Meta(min_length=1)] | None
    """A string, strings, token ids or lists of them; null (or "") starts a new document."""
    max_tokens: NonNegInt | None = None
    """0 is allowed (OpenAI's completions): the choices come back empty."""
    logprobs: NumLogprobs | None = None
    echo: bool | None = None
    best_of: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    suffix: str | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``; other fields pass through to the upstream unchecked."""

    model: ModelName
    input: (
        NonEmptyStr
        | Annotated[list[NonEmptyStr | TokenId | TokenIds], msgspec.Meta(min_length=1, max_length=2048)]
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: PosInt | None = None
    user: str | None = None


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/responses`` (the Responses API); other fields pass through to the upstream unchecked.

    Declared: what the gateway reads (``model`` routes; ``instructions`` and ``input`` are counted;
    ``max_output_tokens`` is reserved; ``stream``) and the sampling bounds chat shares."""

    model: ModelName
    input: str | list[dict[str, Any]] | None = None
    """A user message's text, or a list of input items (messages, tool calls and their outputs)."""
    instructions: str | None = None
    max_output_tokens: PosInt | None = None
    stream: bool | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    tools: list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    user: str | None = None


class PassthroughRequest(msgspec.Struct):
    """A pool's pass-through route (``/tokenize``, ...): a JSON object whose ``model`` routes it; the
    rest is the backend's to check."""

    model: ModelName


ParsedRequest = ChatRequest | CompletionRequest | EmbeddingRequest | ResponsesRequest | PassthroughRequest

_SCHEMAS: dict[Endpoint, type[ParsedRequest]] = {
    Endpoint.CHAT: ChatRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
    Endpoint.RESPONSES: ResponsesRequest,
    Endpoint.PASSTHROUGH: PassthroughRequest,
}
_REQUIRED: dict[Endpoint, tuple[str, ...]] = {
    Endpoint.CHAT: ("model", "messages"),
    Endpoint.COMPLETIONS: ("model", "prompt"),
    Endpoint.EMBEDDINGS: ("model", "input"),
    Endpoint.RESPONSES: ("model",),
    Endpoint.PASSTHROUGH: ("model",),
}


def stream_flags(parsed: ParsedRequest) -> tuple[bool, bool]:
    """(is the answer streamed, did the client ask for chat's usage chunk) of a validated request."""
    if isinstance(parsed, ChatRequest | CompletionRequest):
        return bool(parsed.stream), bool(parsed.stream_options and parsed.stream_options.include_usage)
    if isinstance(parsed, ResponsesRequest):  # usage always comes, in ``response.completed``
        return bool(parsed.stream), False
    return False, False


_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MAX_EXACT_INT = 2**53
"""Past this a float no longer spells its integer exactly."""


def json_number(literal: str) -> float | int:
    """A JSON number written with a fraction or exponent: a whole one (``2.0``, ``1e3``) is the integer
    it equals, as JSON Schema counts it, so an integer field takes it; any other stays a float."""
    value = float(literal)
    return int(value) if value.is_integer() and -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT else value


_decoder = msgspec.json.Decoder(float_hook=json_number)

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects a request body may have. Later stages walk the body (cache keys,
token counts, prefix hashing) and Python's stack would give out near 1,000; real requests (JSON schemas
included) stay far below this."""
_TOO_DEEP = (
    f"The JSON body of your request is nested more than {MAX_JSON_DEPTH} levels deep. "
    "The OpenAI API expects a JSON payload."
)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, dict | list))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return False


_numbers = msgspec.json.Decoder(float_hook=json_number)
T = TypeVar("T")


def decode_as(body: bytes, kind: type[T]) -> T:
    """A small JSON body of the gateway's own endpoints (the admin API, the console) as ``kind``: a whole
    number written ``5.0`` is an integer, as JSON Schema counts it; a body that does not fit is a 400
    naming the field (``param``), one that is not JSON a 400 ``invalid_json``."""
    try:
        return msgspec.convert(_numbers.decode(body), type=kind)
    except msgspec.ValidationError as exc:
        match = _AT.search(str(exc))
        raise InvalidRequest(str(exc), param=match.group("path") if match else None) from None
    except msgspec.DecodeError:
        raise InvalidJSON("The body is not valid JSON.") from None


def _validation_error(error: msgspec.ValidationError) -> InvalidRequest:
    text = str(error)
    match = _AT.search(text)
    param = match.group("path") if match else None
    what = text[: match.start()] if match else text
    missing = re.match(r"Object missing required field `(?P<field>[^`]+)`", what)
    if missing:
        name = f"{param}.{missing.group('field')}" if param else missing.group("field")
        return InvalidRequest(
            f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
        )
    what = what[0].lower() + what[1:] if what else what
    if param:
        return InvalidRequest(f"Invalid value for '{param}': {what}.", param=param, code="invalid_value")
    return InvalidRequest(f"Invalid request: {what}.", code="invalid_value")


def _check_chat(request: ChatRequest) -> None:
    """What a struct cannot say: top_logprobs needs logprobs."""
    if request.top_logprobs is not None and not request.logprobs:
        raise InvalidRequest(
            "Invalid value for 'top_logprobs': logprobs must be true when top_logprobs is set.",
            param="top_logprobs",
            code="invalid_value",
        )


def _check_one_kind(value: object, param: str) -> None:
    """A list of prompts or inputs holds strings, token ids, or lists of token ids: one kind, not a mix."""
    if isinstance(value, list) and len({type(item) for item in value}) > 1:
        raise InvalidRequest(
            f"Invalid value for '{param}': expected strings, token ids or lists of token ids, not a mix.",
            param=param,
            code="invalid_value",
        )


def parse_body(endpoint: Endpoint, raw: bytes) -> tuple[dict[str, Any], ParsedRequest]:
    """Decode and validate a request body: (the dict to forward, the validated view)."""
    try:
        body = _decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise InvalidJSON(
            f"We could not parse the JSON body of your request ({e}). The OpenAI API expects a JSON payload."
        ) from None
    except RecursionError:  # msgspec gives up near depth 1,000
        raise InvalidJSON(_TOO_DEEP) from None
    # fewer brackets than the limit cannot nest past it: the walk is for the rare body with many
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth_exceeds(body, MAX_JSON_DEPTH):
        raise InvalidJSON(_TOO_DEEP)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    for name in _REQUIRED[endpoint]:
        if name not in body:
            raise InvalidRequest(
                f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
            )
    try:
        parsed = msgspec.convert(body, _SCHEMAS[endpoint])
    except msgspec.ValidationError as e:
        raise _validation_error(e) from None
    if isinstance(parsed, ChatRequest):
        _check_chat(parsed)
    elif isinstance(parsed, CompletionRequest):
        _check_one_kind(parsed.prompt, "prompt")
    elif isinstance(parsed, EmbeddingRequest):
        _check_one_kind(parsed.input, "input")
    return body, parsed
