"""OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``, as the gateway and the
engine server both send it. Each keeps its own error tree (``gateway.errors``,
``backends.serving.errors``); this is the one envelope they render to."""

from __future__ import annotations

import msgspec

__all__ = ["ErrorBody", "ErrorEnvelope", "error_envelope", "error_json"]


class ErrorBody(msgspec.Struct):
    """The inner object of OpenAI's ``{"error": {...}}``."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(msgspec.Struct):
    # OpenAI's error envelope. No docstring: msgspec would make it the schema's description in the
    # gateway's /openapi.json, which names this struct.
    error: ErrorBody


_encoder = msgspec.json.Encoder()


def error_envelope(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> ErrorEnvelope:
    """``{"error": {"message": message, "type": error_type, "param": param, "code": code}}``."""
    return ErrorEnvelope(ErrorBody(message, error_type, param, code))


def error_json(message: str, error_type: str, param: str | None = None, code: str | None = None) -> bytes:
    """The envelope as JSON bytes, every field present (``null`` when not set)."""
    return _encoder.encode(ErrorEnvelope(ErrorBody(message, error_type, param, code)))
