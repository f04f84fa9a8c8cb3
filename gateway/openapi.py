"""The gateway's OpenAPI document, built once with the app and served at ``GET /openapi.json``.

The proxied endpoints' request bodies are the msgspec structs of ``gateway.schemas`` (the structs that
validate every request, so the document says what is enforced), with the two rules a struct cannot
state written out by hand (``_ONE_KIND``). The other routes are described in ``_ROUTES``, the key
admin API's in ``gateway.keys.openapi``, the console's in ``gateway.console.openapi``, the admin
operations' in ``gateway.operations`` and the stored responses' in ``gateway.responses.openapi``.
``tests/gateway/test_openapi.py`` holds the document's paths and methods to the app's real routes, and
``tests/reliability/test_schemathesis.py`` holds a running gateway to the document.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import MediaType, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.types import BeforeRequestHookHandler

from gateway.anthropic.openapi import MESSAGES_PATHS, MESSAGES_SCHEMAS
from gateway.batches.openapi import BATCH_PATHS, BATCH_STRUCTS
from gateway.console.openapi import CONSOLE_PATHS, CONSOLE_STRUCTS
from gateway.errors import ErrorEnvelope
from gateway.keys.openapi import KEY_PATHS, KEY_STRUCTS
from gateway.operations import OPERATION_PATHS, OPERATION_STRUCTS
from gateway.responses.openapi import RESPONSE_PATHS, RESPONSE_STRUCTS
from gateway.responses_api import RESPONSES_EVENT, ResponseObject
from gateway.schemas import ChatRequest, CompletionRequest, EmbeddingRequest, ResponsesRequest
from gateway.sso.openapi import SSO_PATHS
from gateway.version import installed_version

OPENAPI_PATH = "/openapi.json"
_REF = "#/components/schemas/{name}"
_JSON = MediaType.JSON.value
_SSE = "text/event-stream"


# ------------------------------------------------------------------------------- response shapes (docs)


class Model(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[Model]


class ChatCompletion(msgspec.Struct):
    """A chat completion as the upstream answered it (other fields pass through)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]


class Completion(msgspec.Struct):
    """A text completion as the upstream answered it (other fields pass through)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]


class EmbeddingList(msgspec.Struct):
    """Embeddings as the upstream answered them (other fields pass through)."""

    object: str
    data: list[dict[str, Any]]
    model: str


class UsageReport(msgspec.Struct):
    """Spend and tokens per tenant for one month."""

    month: str
    tenants: dict[str, Any]


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    status: str
    checks: dict[str, bool]


_STRUCTS = (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ResponsesRequest,
    ErrorEnvelope,
    Model,
    ModelList,
    ChatCompletion,
    Completion,
    ResponseObject,
    EmbeddingList,
    UsageReport,
    Health,
    Readiness,
    *KEY_STRUCTS,
    *CONSOLE_STRUCTS,
    *OPERATION_STRUCTS,
    *RESPONSE_STRUCTS,
    *BATCH_STRUCTS,
)


def _ref(struct: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=struct.__name__)}


_TOKEN_IDS = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}


def _one_kind(text: dict[str, Any], max_items: int | None) -> dict[str, Any]:
    """A string, or a list of one kind: strings, token ids, or lists of token ids (never a mix)."""
    bounds: dict[str, int] = {"minItems": 1} | ({"maxItems": max_items} if max_items else {})
    return {
        "anyOf": [
            text,
            {"type": "array", **bounds, "items": text},
            {"type": "array", **bounds, "items": {"type": "integer", "minimum": 0}},
            {"type": "array", **bounds, "items": _TOKEN_IDS},
        ]
    }


# what msgspec cannot state: a list of prompts or inputs holds one kind (gateway.schemas._check_one_kind)
_ONE_KIND: dict[tuple[str, str], dict[str, Any]] = {
    ("CompletionRequest", "prompt"): {
        "anyOf": [*_one_kind({"type": "string"}, None)["anyOf"], {"type": "null"}],
        "description": 'null or "" starts a new document.',
    },
    ("EmbeddingRequest", "input"): _one_kind({"type": "string", "minLength": 1}, 2048),
}


# nor that top_logprobs needs logprobs: true (gateway.schemas._check_chat)
_TOP_LOGPROBS_NEEDS_LOGPROBS = {
    "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
    "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}},
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": _ref(ErrorEnvelope)}}}


_SSE_EVENT = {
    "description": "One server-sent event (OpenAPI 3.1: `schema` describes each event of the stream).",
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A chunk of the upstream's (JSON), an OpenAI error object (JSON) when the stream "
            "fails after it started, or `[DONE]`, the last event.",
        }
    },
}


def _ok(struct: type, description: str, *, is_stream: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {_JSON: {"schema": _ref(struct)}}
    if is_stream:
        content[_SSE] = {"schema": _SSE_EVENT}
    return {"description": description, "content": content}


_PROXY_ERRORS = {
    "400": _error("The request is invalid (invalid_json, invalid_value, missing_required_parameter)."),
    "401": _error("No API key, or an unknown one (invalid_api_key)."),
    "403": _error("The key may not do this (permission_denied)."),
    "404": _error("No such model, or not for this key (model_not_found)."),
    "413": _error("The body is over the size limit (request_too_large)."),
    "429": _error(
        "A rate, token or spend limit was reached (rate_limit_exceeded, insufficient_quota), or too many "
        "failed authentications from this address (too_many_auth_failures)."
    ),
    "4XX": _error("The upstream's own 4xx, relayed with its status and body."),
    "500": _error("A gateway bug (internal_error)."),
    "502": _error("The upstream failed or answered badly (upstream_error, upstream_connect_error, ...)."),
    "503": _error("No healthy replica, or the store is down (service_unavailable, store_unavailable)."),
    "504": _error("The upstream did not answer in time (upstream_timeout)."),
}


def _proxied(summary: str, request: type, response: type, *, is_stream: bool) -> dict[str, Any]:
    what = "The upstream's response (a JSON body, or server-sent events when `stream` is true)."
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {_JSON: {"schema": _ref(request)}}},
            "responses": {"200": _ok(response, what, is_stream=is_stream), **_PROXY_ERRORS},
        }
    }


def _responses() -> dict[str, Any]:
    """``POST /v1/responses``: the Responses API, its stream typed events (``RESPONSES_EVENT``)."""
    summary = "Create a model response (the Responses API)"
    item = _proxied(summary, ResponsesRequest, ResponseObject, is_stream=True)
    item["post"]["responses"]["200"]["content"][_SSE] = {"schema": RESPONSES_EVENT}
    return item


_PUBLIC: list[dict[str, list[str]]] = []  # no API key needed
_UNAUTHORIZED = _error("No API key, or an unknown one (invalid_api_key).")
_AUTH_FAILURES = _error("Too many failed authentications from this address (too_many_auth_failures).")
_OPEN_LIMITED = _error("Too many requests from this address (rate_limit_exceeded).")

_ROUTES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": _proxied("Create a chat completion", ChatRequest, ChatCompletion, is_stream=True),
    "/v1/completions": _proxied("Create a text completion", CompletionRequest, Completion, is_stream=True),
    "/v1/embeddings": _proxied("Create embeddings", EmbeddingRequest, EmbeddingList, is_stream=False),
    "/v1/responses": _responses(),
    **RESPONSE_PATHS,
    "/v1/models": {
        "get": {
            "summary": "List the models this key may use",
            "responses": {
                "200": _ok(ModelList, "The models."),
                "401": _UNAUTHORIZED,
                "429": _AUTH_FAILURES,
            },
        }
    },
    "/v1/models/{model_id}": {
        "get": {
            "summary": "Retrieve a model",
            "parameters": [
                {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": _ok(Model, "The model."),
                "401": _UNAUTHORIZED,
                "404": _error("No such model, or not for this key (model_not_found)."),
                "429": _AUTH_FAILURES,
            },
        }
    },
    "/v1/usage": {
        "get": {
            "summary": "Spend and tokens per tenant, key and pool for a month (admin keys only)",
            "parameters": [
                {
                    "name": "month",
                    "in": "query",
                    "schema": {"type": "string", "pattern": r"^(\d{4}-(0[1-9]|1[0-2]))?$"},
                    "description": "YYYY-MM; the current month when left out or empty.",
                },
                {"name": "tenant", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": _ok(UsageReport, "The usage report."),
                "400": _error("A malformed month (invalid_request)."),
                "401": _UNAUTHORIZED,
                "403": _error("No role allowed here (admin_key_required, insufficient_role)."),
                "429": _AUTH_FAILURES,
                "503": _error("The usage store is down (store_unavailable)."),
            },
        }
    },
    "/healthz": {
        "get": {
            "summary": "Liveness",
            "security": _PUBLIC,
            "responses": {"200": _ok(Health, "The process is up.")},
        }
    },
    "/readyz": {
        "get": {
            "summary": "Readiness: policy loaded, store reachable, a healthy replica",
            "security": _PUBLIC,
            "responses": {
                "200": _ok(Readiness, "Ready."),
                "503": _ok(Readiness, "Not ready; `checks` says why."),
            },
        }
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus metrics",
            "security": _PUBLIC,
            "responses": {
                "200": {
                    "description": "The Prometheus text format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "429": _OPEN_LIMITED,
            },
        }
    },
    **KEY_PATHS,
    **CONSOLE_PATHS,
    **OPERATION_PATHS,
    **SSO_PATHS,
    **MESSAGES_PATHS,
    **BATCH_PATHS,
    OPENAPI_PATH: {
        "get": {
            "summary": "This document",
            "security": _PUBLIC,
            "responses": {
                "200": {"description": "OpenAPI 3.1.", "content": {_JSON: {"schema": {"type": "object"}}}},
                "429": _OPEN_LIMITED,
            },
        }
    },
}


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route the gateway serves."""
    _, schemas = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    for (struct, field), schema in _ONE_KIND.items():
        schemas[struct]["properties"][field] = schema
    schemas["ChatRequest"].update(_TOP_LOGPROBS_NEEDS_LOGPROBS)
    schemas.update(MESSAGES_SCHEMAS)
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Sortyard",
            "version": installed_version(),
            "description": "An OpenAI-compatible gateway. Errors come in OpenAI's shape: "
            '`{"error": {"message", "type", "param", "code"}}`.',
        },
        "paths": _ROUTES,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearerAuth": []}],
    }
    # as JSON holds it (a struct's tuple default is a list there), so the built and served documents match
    result: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(document))
    return result


def openapi_route(before_request: BeforeRequestHookHandler | None = None) -> HTTPRouteHandler:
    """``GET /openapi.json``: the document, encoded once here (no work per request); ``before_request``
    may answer instead (the per-client limit on open endpoints)."""
    body = msgspec.json.encode(build_document())

    @get(OPENAPI_PATH, include_in_schema=False, before_request=before_request)
    async def openapi_document() -> Response[bytes]:
        return Response(content=body, media_type=MediaType.JSON)

    return openapi_document
