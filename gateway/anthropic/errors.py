"""Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}`` and its types by status.

The gateway's errors (``gateway.errors``) and an upstream's OpenAI envelopes both become this shape on
the Messages routes; the status stays what it was.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.params import MessagesParams

__all__ = ["error_event", "error_json", "error_type", "from_openai_body"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (``api_error`` for any other 5xx)."""
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_json(status: int, message: str, request_id: str | None = None) -> bytes:
    """The error body Anthropic's API answers with ``status``."""
    body: dict[str, Any] = {"type": "error", "error": {"type": error_type(status), "message": message}}
    if request_id:
        body["request_id"] = request_id
    return msgspec.json.encode(body)


def error_event(status: int, message: str) -> bytes:
    """The same error as the ``error`` event of a stream that has started."""
    return b"event: error\ndata: " + error_json(status, message) + b"\n\n"


def from_openai_body(
    status: int, body: bytes, request_id: str | None = None, params: MessagesParams | None = None
) -> bytes:
    """An OpenAI error envelope (the gateway's own or an upstream's) as Anthropic's error; the
    parameter it names, if any, is put in front of the message (Anthropic has no ``param``). ``params``:
    the fields of the translated request, when the error is about it, named as the client sent them."""
    try:
        document = msgspec.json.decode(body)
        error = document["error"]
        message = str(error.get("message") or "")
        param = error.get("param")
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        message, param = body.decode("utf-8", "replace")[:2000] or "error", None
    if params is not None:
        message = params.message(message)
        param = params.param(param) if isinstance(param, str) else param
    if param and not _names(message, str(param)):
        message = f"{param}: {message}"
    return error_json(status, message, request_id)


def _names(message: str, param: str) -> bool:
    """Whether ``message`` starts with ``param`` or a field inside it (``tools.0.name: ...``)."""
    return message.startswith(param) and message[len(param) : len(param) + 1] in (":", ".", " ", "[", "")
