"""The engine server's error tree, rendered in OpenAI's error shape (``sortyard.openai_errors``).

::

    ServingError                      (500 server_error / internal_error: a bug, never expected)
    +-- HTTPError                     (Litestar's 404 / 405 / 413, with their own status)
    +-- InvalidRequest                (400 invalid_request_error / invalid_value, missing_required_parameter)
    |   +-- InvalidJSON               (400 invalid_json)
    |   +-- ContextLengthExceeded     (400 context_length_exceeded)
    |   +-- UnsupportedValue          (400 unsupported_value: valid OpenAI, not served by this engine)
    |   +-- UnsupportedParameter      (400 unsupported_parameter: a feature not served yet, e.g. tools)
    +-- ModelNotFound                 (404 model_not_found)
    +-- QueueFull                     (429 queue_full, Retry-After: 1)
    +-- NotReady                      (503 model_not_ready, Retry-After: 1)
    +-- EngineFailed                  (500 engine_error: the engine reported an error for the request)
    +-- ClientDisconnected            (never rendered: the client is gone)

Foreign errors (msgspec, the engine's ValueError and QueueFullError) are translated where they are met;
the app installs one exception handler that renders any of these with :meth:`ServingError.to_json`.
"""

from __future__ import annotations

import re
from typing import ClassVar

import msgspec

from sortyard.openai_errors import error_json

_HTTP_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


class ServingError(Exception):
    """Base of every error the server renders to a client."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = self.status if status_code is None else status_code
        """The HTTP status sent; the class's ``status`` unless a foreign error carried its own."""
        self.error_type = self.type if self.status_code < 500 or status_code is None else "server_error"
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def to_json(self) -> bytes:
        return error_json(self.message, self.error_type, self.param, self.code)

    def to_sse(self) -> bytes:
        """The error as one SSE event, for failures after a stream has started."""
        return b"data: " + self.to_json() + b"\n\n"


class HTTPError(ServingError):
    """A framework HTTP error (unknown route, wrong method, body too large) with its own status."""

    type = "invalid_request_error"
    default_code: ClassVar[str | None] = None

    def __init__(self, message: str, *, status_code: int, headers: dict[str, str] | None = None) -> None:
        code = _HTTP_CODES.get(status_code, "http_error")
        super().__init__(message, status_code=status_code, code=code, headers=headers)


class InvalidRequest(ServingError):
    status = 400
    type = "invalid_request_error"
    default_code: ClassVar[str | None] = "invalid_value"


class InvalidJSON(InvalidRequest):
    default_code = "invalid_json"


class ContextLengthExceeded(InvalidRequest):
    default_code = "context_length_exceeded"


class UnsupportedValue(InvalidRequest):
    """A value OpenAI's API accepts that this engine does not serve (``echo``, ``suffix``, ...)."""

    default_code = "unsupported_value"


class UnsupportedParameter(InvalidRequest):
    """A field asking for a feature this engine does not serve yet (``tools``, ``response_format``, ...)."""

    default_code = "unsupported_parameter"


class ModelNotFound(ServingError):
    status = 404
    type = "invalid_request_error"
    default_code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist.", param="model")


class QueueFull(ServingError):
    status = 429
    type = "rate_limit_error"
    default_code = "queue_full"

    def __init__(self, message: str = "The server's waiting queue is full; retry shortly.") -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class NotReady(ServingError):
    status = 503
    type = "server_error"
    default_code = "model_not_ready"

    def __init__(self, message: str = "The model is still loading.") -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class EngineFailed(ServingError):
    default_code = "engine_error"


class ClientDisconnected(ServingError):
    """The client closed the connection; the request was aborted and nothing is sent."""

    status = 499
    default_code = "client_disconnected"


_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


def invalid_request_from(error: msgspec.ValidationError) -> InvalidRequest:
    """A msgspec validation error as OpenAI words it (the gateway's gateway/schemas.py does the same)."""
    text = str(error)
    match = _AT.search(text)
    param = (match.group("path") or None) if match else None
    what = text[: match.start()] if match else text
    missing = _MISSING.match(what)
    if missing:
        name = f"{param}.{missing.group('field')}" if param else missing.group("field")
        return InvalidRequest(
            f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
        )
    what = what[:1].lower() + what[1:]
    if param:
        return InvalidRequest(f"Invalid value for '{param}': {what}.", param=param)
    return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
