"""What a client sends on ``/v1/ws``: one JSON object a message, read into a ``ClientMessage``.

A message is a request (the default), ``{"type": "auth", "api_key": ...}`` or ``{"type": "cancel",
"id": ...}``. A request is a chat completion's body (``model``, ``messages``, ``max_tokens``,
``temperature``, ... forwarded as they are) plus the fields the socket itself reads and never
forwards: ``id`` (echoed on every frame of the answer), ``mode`` (``tokens`` or ``openai``) and, in
a connection's first message only, ``api_key``. A ``prompt`` without ``messages`` becomes one user
message. ``stream`` is always on: answers arrive as they are generated.

The body is handed to ``gateway.proxy.new_call`` as bytes, so a request over the socket is validated
exactly as the same body posted to ``/v1/chat/completions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec

from gateway.errors import GatewayError, InvalidJSON, InvalidRequest

__all__ = [
    "MAX_ID_LENGTH",
    "ClientMessage",
    "Kind",
    "MessageError",
    "MessageId",
    "Mode",
    "mode_of_query",
    "read_message",
]

MessageId = str | int | None
"""A request's ``id`` as the client gave it (None: no id)."""

MAX_ID_LENGTH = 128
"""Longest string ``id`` (it is echoed on every frame)."""


class Kind(Enum):
    """What a message asks for (its ``type``)."""

    REQUEST = "request"
    AUTH = "auth"
    CANCEL = "cancel"


class Mode(Enum):
    """How a request's answer is framed (``gateway.websocket.frames``)."""

    TOKENS = "tokens"
    """``{"token": ...}`` per content delta."""
    OPENAI = "openai"
    """``{"chunk": ...}``: each chunk exactly as the SSE stream sends it."""


@dataclass(frozen=True, slots=True)
class ClientMessage:
    """One message, read and checked; ``body`` is the chat completion to run (requests only)."""

    kind: Kind
    id: MessageId
    mode: Mode
    api_key: str | None = None
    body: bytes = b""


class MessageError(Exception):
    """A message that cannot be served as sent; its error frame echoes ``id`` when it could be read."""

    def __init__(self, error: GatewayError, id: MessageId = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.id = id


_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode
_KINDS = {kind.value: kind for kind in Kind}
_MODES = {mode.value: mode for mode in Mode}
_MAX_INT_ID = 2**63


def _read_id(document: dict[str, Any]) -> MessageId:
    value = document.pop("id", None)
    if value is None or (isinstance(value, str) and len(value) <= MAX_ID_LENGTH):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and -_MAX_INT_ID <= value < _MAX_INT_ID:
        return value
    raise MessageError(
        InvalidRequest(
            f"Invalid value for 'id': expected a string of at most {MAX_ID_LENGTH} characters or an integer.",
            param="id",
            code="invalid_type",
        )
    )


def _choice(document: dict[str, Any], name: str, choices: dict[str, Any], default: str, id: MessageId) -> Any:
    value = document.pop(name, None)
    found = choices.get(default if value is None else value) if isinstance(value, str | None) else None
    if found is None:
        expected = ", ".join(f"'{choice}'" for choice in choices)
        raise MessageError(
            InvalidRequest(
                f"Invalid value for '{name}': expected one of {expected}.", param=name, code="invalid_value"
            ),
            id,
        )
    return found


def _chat_body(document: dict[str, Any], id: MessageId) -> bytes:
    """The chat completion to run: ``prompt`` turned into one user message, ``stream`` on."""
    if "prompt" in document:
        if "messages" in document:
            raise MessageError(
                InvalidRequest(
                    "Give either 'prompt' or 'messages', not both.", param="prompt", code="invalid_value"
                ),
                id,
            )
        prompt = document.pop("prompt")
        if not isinstance(prompt, str):
            raise MessageError(
                InvalidRequest(
                    "Invalid value for 'prompt': expected a string.", param="prompt", code="invalid_type"
                ),
                id,
            )
        document["messages"] = [{"role": "user", "content": prompt}]
    elif "messages" not in document:
        raise MessageError(
            InvalidRequest(
                "Missing required parameter: 'prompt' (or 'messages').",
                param="prompt",
                code="missing_required_parameter",
            ),
            id,
        )
    document["stream"] = True
    return _encode(document)


def read_message(data: str | bytes, default_mode: str = Mode.TOKENS.value) -> ClientMessage:
    """One client message; MessageError when it is not JSON or not a message the socket can serve.
    ``default_mode`` is the connection's (its ``?mode=`` query parameter)."""
    try:
        document = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise MessageError(
            InvalidJSON(
                f"We could not parse the JSON of your message ({e}). Each message is one JSON object."
            )
        ) from None
    except RecursionError:  # msgspec gives up near depth 1,000; new_call refuses far less deep
        raise MessageError(InvalidJSON("The JSON of your message is nested too deeply.")) from None
    if not isinstance(document, dict):
        raise MessageError(InvalidRequest("A message must be a JSON object.", code="invalid_type"))
    id = _read_id(document)
    kind: Kind = _choice(document, "type", _KINDS, Kind.REQUEST.value, id)
    mode: Mode = _choice(document, "mode", _MODES, default_mode, id)
    api_key = document.pop("api_key", None)
    if api_key is not None and not isinstance(api_key, str):
        raise MessageError(
            InvalidRequest(
                "Invalid value for 'api_key': expected a string.", param="api_key", code="invalid_type"
            ),
            id,
        )
    if kind is Kind.CANCEL and id is None:
        raise MessageError(
            InvalidRequest(
                "Missing required parameter: 'id' (the request to cancel).",
                param="id",
                code="missing_required_parameter",
            )
        )
    if kind is not Kind.REQUEST:
        return ClientMessage(kind, id, mode, api_key)
    return ClientMessage(kind, id, mode, api_key, _chat_body(document, id))


def mode_of_query(query_string: bytes) -> str:
    """A connection's default mode, from its URL (``?mode=openai``); checked with each request."""
    for pair in query_string.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == b"mode":
            return value.decode("latin-1")
    return Mode.TOKENS.value
