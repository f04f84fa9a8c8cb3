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
