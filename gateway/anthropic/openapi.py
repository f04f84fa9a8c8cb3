"""The Messages API's part of the OpenAPI document (``gateway.openapi`` merges ``MESSAGES_PATHS`` and
``MESSAGES_SCHEMAS``): the request as ``schema.py`` validates it, the message, Anthropic's error shape."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.schema import CountTokensRequest, MessagesRequest

__all__ = ["MESSAGES_PATHS", "MESSAGES_SCHEMAS"]

_JSON = "application/json"
_SSE = "text/event-stream"

ERROR = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
        "request_id": {"type": "string"},
    },
}
"""Anthropic's error: ``{"type": "error", "error": {"type", "message"}}``."""

MESSAGES_EVENT = {
    "description": "One server-sent event of the Messages API: its name, then its JSON (`message_start`, "
    "`content_block_delta`, ..., `message_stop`; `error` when the stream fails).",
    "type": "object",
    "required": ["event", "data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
_REF = "#/components/schemas/Anthropic{name}"
_, _COMPONENTS = msgspec.json.schema_components([MessagesRequest, CountTokensRequest], ref_template=_REF)
MESSAGES_SCHEMAS: dict[str, Any] = {f"Anthropic{name}": schema for name, schema in _COMPONENTS.items()}
"""The request Structs' schemas (``schema.py``: what is validated is what is documented), their names
prefixed so they never meet the OpenAI shapes' in the document's components."""
_REQUEST = {"$ref": _REF.format(name="MessagesRequest")}
_COUNT_REQUEST = {"$ref": _REF.format(name="CountTokensRequest")}
_MESSAGE = {
    "type": "object",
    "required": ["id", "type", "role", "content", "model", "stop_reason", "usage"],
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "content": {"type": "array", "items": {"type": "object"}},
        "model": {"type": "string"},
        "stop_reason": {"type": ["string", "null"]},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": {"type": "object"},
    },
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": ERROR}}}


_ERRORS = {
    "400": _error("The request is invalid (invalid_request_error; the field is named in the message)."),
    "401": _error("No API key in x-api-key (or a bearer Authorization), or an unknown one."),
    "403": _error("The key may not do this (permission_error)."),
    "404": _error("No such model, or not for this key (not_found_error)."),
    "413": _error("The body is over the size limit (request_too_large)."),
    "429": _error("A rate, token or spend limit was reached (rate_limit_error)."),
    "4XX": _error("The upstream's own 4xx, with its status."),
    "500": _error("A gateway bug (api_error)."),
    "502": _error("The upstream failed or answered badly (api_error)."),
    "503": _error("No healthy replica, or the store is down (overloaded_error)."),
    "504": _error("The upstream did not answer in time (timeout_error)."),
}
_KEY_NOTE = (
    "The key comes in Anthropic's `x-api-key` header (the one checked when present) or as a bearer "
    "`Authorization`, as on every route; `anthropic-version` is accepted and not needed."
)


MESSAGES_PATHS: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "post": {
            "summary": "Create a message (Anthropic's Messages API, over the pool's chat completions)",
            "description": _KEY_NOTE,
            "requestBody": {"required": True, "content": {_JSON: {"schema": _REQUEST}}},
            "responses": {
                "200": {
                    "description": "The message, or Anthropic's event stream when `stream` is true.",
                    "content": {_JSON: {"schema": _MESSAGE}, _SSE: {"schema": MESSAGES_EVENT}},
                },
                **_ERRORS,
            },
        }
    },
    "/v1/messages/count_tokens": {
        "post": {
            "summary": "Count a Messages request's input tokens, as the gateway's limits count them",
            "description": _KEY_NOTE,
            "requestBody": {"required": True, "content": {_JSON: {"schema": _COUNT_REQUEST}}},
            "responses": {
                "200": {
                    "description": "The count.",
                    "content": {
                        _JSON: {
                            "schema": {
                                "type": "object",
                                "required": ["input_tokens"],
                                "properties": {"input_tokens": {"type": "integer"}},
                            }
                        }
                    },
                },
                **{status: _ERRORS[status] for status in ("400", "401", "404", "429", "500", "503")},
            },
        }
    },
}
