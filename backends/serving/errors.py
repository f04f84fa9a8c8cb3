"""The engine server's error tree and the one renderer of OpenAI's error shape.

::

    ServingError                      (500 server_error / internal_error: a bug, never expected)
    +-- HTTPError                     (Litestar's 404 / 405 / 413, with their own status)
    +-- InvalidRequest                (400 invalid_request_error)
    |   +-- InvalidJSON               (400 invalid_json)
    |   +-- ContextLengthExceeded     (400 context_length_exceeded)
    +-- ModelNotFound                 (404 model_not_found)
    +-- QueueFull                     (429 queue_full, Retry-After: 1)
    +-- NotReady                      (503 model_not_ready, Retry-After: 1)
    +-- EngineFailed                  (500 engine_error: the engine reported an error for the request)
    +-- ClientDisconnected            (never rendered: the client is gone)

Foreign errors (msgspec, the engine's ValueError and QueueFullError) are translated where they are met;
the app installs one exception handler that renders any of these with :meth:`ServingError.to_json`.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec


class ErrorBody(msgspec.Struct):
    """The inner object of OpenAI's ``{"error": {...}}``."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(msgspec.Struct):
    """OpenAI's error envelope."""

    error: ErrorBody


_encoder = msgspec.json.Encoder()


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
        return _encoder.encode(ErrorEnvelope(ErrorBody(self.message, self.error_type, self.param, self.code)))

    def to_sse(self) -> bytes:
        """The error as one SSE event, for failures after a stream has started."""
        return b"data: " + self.to_json() + b"\n\n"


class HTTPError(ServingError):
    """A framework HTTP error (unknown route, wrong method, body too large) with its own status."""

    type = "invalid_request_error"
    default_code: ClassVar[str | None] = None


class InvalidRequest(ServingError):
    status = 400
    type = "invalid_request_error"
    default_code: ClassVar[str | None] = None


class InvalidJSON(InvalidRequest):
    default_code = "invalid_json"


class ContextLengthExceeded(InvalidRequest):
    default_code = "context_length_exceeded"


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


def param_from_msgspec(message: str) -> str | None:
    """The field path in a msgspec validation message (``... - at `$.messages[0].role` `` -> that path)."""
    marker = "- at `$."
    start = message.rfind(marker)
    if start < 0:
        return None
    return message[start + len(marker) :].rstrip("`")
