"""OpenAI request shapes, for validation only.

The body is decoded once into plain Python objects (that is what gets forwarded, unknown fields
and all) and then checked against these structs with ``msgspec.convert``. Only fields whose type
the gateway must trust are declared; everything else passes through to the upstream untouched.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from gateway.errors import InvalidJSON, InvalidRequest
from gateway.pipeline import Endpoint

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1, le=128)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class Message(msgspec.Struct):
    role: str
    content: str | list[dict[str, Any]] | None = None


class _Sampling(msgspec.Struct):
    model: ModelName
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: NonNegInt | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    n: PosInt | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None


class ChatRequest(_Sampling):
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)] = msgspec.field(default_factory=list)
    max_completion_tokens: NonNegInt | None = None
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str | int | list[int]] = ""
    echo: bool | None = None


class EmbeddingRequest(msgspec.Struct):
    model: ModelName
    input: str | list[str | int | list[int]]
    encoding_format: str | None = None
    dimensions: Annotated[int, msgspec.Meta(ge=1)] | None = None


ParsedRequest = ChatRequest | CompletionRequest | EmbeddingRequest

_SCHEMAS: dict[Endpoint, type[ParsedRequest]] = {
    Endpoint.CHAT: ChatRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
}
_REQUIRED: dict[Endpoint, tuple[str, ...]] = {
    Endpoint.CHAT: ("model", "messages"),
    Endpoint.COMPLETIONS: ("model", "prompt"),
    Endpoint.EMBEDDINGS: ("model", "input"),
}
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_decoder = msgspec.json.Decoder()

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
    return body, parsed
