"""The gateway's error tree, rendered in OpenAI's error shape (``sortyard.openai_errors``).

``ErrorClass (status default_code)``, each rendered as ``{"error": {"message", "type", "param",
"code"}}``::

    GatewayError                      (500 internal_error: a bug, never expected)
    +-- InvalidRequest                (400 invalid_request)
    |   +-- InvalidJSON               (400 invalid_json)
    |   +-- BodyTooLarge              (413 request_too_large)
    |   +-- RequestTimeout            (408 request_timeout: headers or body too slow to arrive)
    +-- AuthenticationFailed          (401 invalid_api_key)
    +-- PermissionDenied              (403 permission_denied: an admin endpoint without an admin key)
    +-- ModelNotFound                 (404 model_not_found: also for a model the key may not use)
    +-- NotFound                      (404 not_found: an unknown URL)
    +-- MethodNotAllowed              (405 method_not_allowed)
    +-- Conflict                      (409 conflict: a key name taken, a key the policy file owns)
    +-- RateLimited                   (429 rate_limit_exceeded / insufficient_quota, Retry-After)
    +-- UpstreamError                 (502 upstream_error: the upstream answered badly)
    |   +-- UpstreamConnectError      (502 upstream_connect_error)
    |   +-- UpstreamProtocolError     (502 upstream_protocol_error: malformed body or SSE)
    |   +-- UpstreamStatusError       (the upstream's own 4xx, relayed with its status)
    +-- UpstreamTimeout               (504 upstream_timeout)
    +-- ClientDisconnected            (499 client_closed_request: never sent; it names the outcome)
    +-- ServiceUnavailable            (503 service_unavailable / no_healthy_replica / store_unavailable)

Foreign exceptions (aiohttp, msgspec, redis) are translated at the edge that meets them. The
request's owner (``gateway.proxy``) and the other endpoints (``gateway.routes``) render any of these
with :func:`render`.
"""

from __future__ import annotations

from typing import ClassVar

from sortyard.openai_errors import ErrorEnvelope, error_envelope, error_json


class GatewayError(Exception):
    """Base of every error the gateway renders to a client."""

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
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def body(self) -> ErrorEnvelope:
        return error_envelope(self.message, self.type, self.param, self.code)

    def to_json(self) -> bytes:
        return error_json(self.message, self.type, self.param, self.code)

    def to_sse(self) -> bytes:
        """The error as one SSE event, for failures after a stream has started."""
        return b"data: " + self.to_json() + b"\n\n"


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    default_code = "invalid_request"


class InvalidJSON(InvalidRequest):
    default_code = "invalid_json"


class BodyTooLarge(InvalidRequest):
    status = 413
    default_code = "request_too_large"


class RequestTimeout(InvalidRequest):
    """The client was too slow to send its request (headers or body); the connection is closed."""

    status = 408
    default_code = "request_timeout"


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"
    default_code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "invalid_request_error"
    default_code = "permission_denied"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    default_code = "model_not_found"

    @classmethod
    def for_model(cls, model: str) -> ModelNotFound:
        # OpenAI's own wording, so clients that match on it keep working.
        return cls(f"The model `{model}` does not exist or you do not have access to it.", param="model")


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    default_code = "not_found"


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    default_code = "conflict"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    status = 502
    type = "server_error"
    default_code = "upstream_error"


class UpstreamConnectError(UpstreamError):
    default_code = "upstream_connect_error"


class UpstreamProtocolError(UpstreamError):
    default_code = "upstream_protocol_error"


class UpstreamStatusError(UpstreamError):
    """A 4xx the upstream gave; relayed with the upstream's own status and body."""

    def __init__(self, status: int, body: bytes, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message, code="upstream_status", headers=headers)
        self.upstream_status = status
        self.upstream_body = body


class UpstreamTimeout(GatewayError):
    status = 504
    type = "server_error"
    default_code = "upstream_timeout"


class ClientDisconnected(GatewayError):
    """The client went away before its response was complete (nginx's 499). Nothing is sent; it is what
    finishers, metrics and logs record for such a request."""

    status = 499
    type = "invalid_request_error"
    default_code = "client_closed_request"


class ServiceUnavailable(GatewayError):
    status = 503
    type = "server_error"
    default_code = "service_unavailable"


def status_of(error: GatewayError) -> int:
    if isinstance(error, UpstreamStatusError):
        return error.upstream_status
    return error.status


def render(error: GatewayError) -> tuple[int, bytes, dict[str, str]]:
    """(status, JSON body, extra headers) for any gateway error."""
    if isinstance(error, UpstreamStatusError):
        return error.upstream_status, error.upstream_body, error.headers
    return error.status, error.to_json(), error.headers
