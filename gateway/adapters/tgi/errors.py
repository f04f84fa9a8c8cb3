"""TGI's errors as OpenAI's: error bodies, a stream's error events, and the status of each error type.

TGI's ``{"error": "<text>", "error_type": "validation" | "generation" | "overloaded" |
"incomplete_generation" | ...}`` (422, 424, 429, 500; a non-JSON body from its request parser) becomes
an OpenAI envelope with the status kept and ``code`` the ``error_type`` (``type``
``invalid_request_error`` for validation, template and tool errors, ``rate_limit_error`` for
overloaded, ``server_error`` for generation failures). In a stream TGI sends its error as an event
(``data:{"error": "...", "error_type": ...}``, or TGI 3's ``data:{"error": {"message",
"http_status_code"}}``), HTTP status 200: it becomes an OpenAI error event; a folded plain answer
raises it as the status the error type has on ``/generate`` (422 validation: the client's 422).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.adapters.shapes import error_type_of

__all__ = ["envelope", "error_data", "read_error", "translate_error"]

_WHAT = "TGI"
_encode = msgspec.json.encode

_ERROR_STATUS = {"validation": 422, "generation": 424, "overloaded": 429}
"""The HTTP status each ``error_type`` has on ``/generate`` (others: 500)."""
_ERROR_TYPES = {
    "validation": "invalid_request_error",
    "template_error": "invalid_request_error",
    "missing_template_variable": "invalid_request_error",
    "tool_error": "invalid_request_error",
    "overloaded": "rate_limit_error",
    "generation": "server_error",
    "incomplete_generation": "server_error",
    "incomplete_generation_stream": "server_error",
}


def envelope(status: int, message: str, error_type: str | None) -> bytes:
    kind = _ERROR_TYPES.get(error_type or "") or error_type_of(status)
    error = {"message": message, "type": kind, "param": None, "code": error_type or "upstream_status"}
    return _encode({"error": error})


def read_error(error: Any, error_type: Any) -> tuple[int, str, str | None]:
    """(status, message, error type) of TGI's error field: TGI's text with its ``error_type``, or TGI 3's
    streamed ``{"message", "http_status_code"}``."""
    kind = error_type if isinstance(error_type, str) and error_type else None
    if isinstance(error, dict):
        message = error.get("message")
        status = error.get("http_status_code")
        kind = kind or (error.get("type") if isinstance(error.get("type"), str) else None)
        if not isinstance(status, int) or status < 400:
            status = _ERROR_STATUS.get(kind or "", 500)
        return status, message if isinstance(message, str) and message else f"{_WHAT} failed", kind
    message = error if isinstance(error, str) and error else f"{_WHAT} failed"
    return _ERROR_STATUS.get(kind or "", 500), message, kind


def error_data(document: dict[str, Any]) -> bytes:
    """An OpenAI error event's payload for TGI's error event."""
    status, message, kind = read_error(document.get("error"), document.get("error_type"))
    return envelope(status, message, kind)


def translate_error(status: int, payload: bytes) -> bytes:
    try:
        document = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        document = None
    if isinstance(document, dict) and "error" in document:
        _, message, kind = read_error(document["error"], document.get("error_type"))
        return envelope(status, message, kind)
    text = payload.decode("utf-8", "replace").strip()[:500]
    return envelope(status, f"{_WHAT} answered HTTP {status}: {text}" if text else f"HTTP {status}", None)
