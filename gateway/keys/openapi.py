"""The key admin API's part of the OpenAPI document (``gateway.openapi`` merges it into
``GET /openapi.json``), beside the routes it describes (``gateway.keys.routes``).

``KEY_STRUCTS`` are the bodies the routes read and answer (their schemas become components) and
``KEY_PATHS`` the operations: ``tests/gateway/test_openapi.py`` and the schemathesis suite hold the
routes to them, as they do every route the gateway answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.keys.records import AuditEntry, KeyChanges, KeySpec, KeyView, RotateSpec

__all__ = ["KEY_PATHS", "KEY_STRUCTS"]

_JSON = "application/json"


class KeyList(msgspec.Struct):
    object: str
    data: list[KeyView]


class AuditList(msgspec.Struct):
    object: str
    data: list[AuditEntry]


KEY_STRUCTS = (KeySpec, KeyChanges, KeyView, KeyList, AuditList, RotateSpec)


def _ref(struct: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{struct.__name__}"}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }


def _admin(
    summary: str, response: type, *, body: type | None = None, body_required: bool = False, **extra: Any
) -> dict[str, Any]:
    """One key admin operation (admin keys only)."""
    operation: dict[str, Any] = {
        "summary": summary + " (by role, docs/security.md#roles)",
        "responses": {
            "200": {"description": "Done.", "content": {_JSON: {"schema": _ref(response)}}},
            "400": _error("An invalid body or parameter (invalid_request, unknown_pool, unknown_model)."),
            "401": _error("No API key, or an unknown one (invalid_api_key)."),
            "403": _error("The key's role may not (insufficient_role; no role at all: admin_key_required)."),
            "404": _error("No such key (key_not_found)."),
            "409": _error("The name is taken, the key changed meanwhile, or the policy file owns it."),
            "429": _error("Too many failed authentications from this address (too_many_auth_failures)."),
            "503": _error("The key store is down (store_unavailable)."),
        },
        **extra,
    }
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": {_JSON: {"schema": _ref(body)}}}
    return operation


_NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]

KEY_PATHS: dict[str, dict[str, Any]] = {
    "/v1/admin/keys": {
        "post": _admin(
            "Create a key; its secret is in this answer only", KeyView, body=KeySpec, body_required=True
        ),
        "get": _admin(
            "List every key, the policy file's too",
            KeyList,
            parameters=[{"name": "tenant", "in": "query", "schema": {"type": "string"}}],
        ),
    },
    "/v1/admin/keys/{name}": {
        "get": _admin("Show a key", KeyView, parameters=_NAME),
        "patch": _admin(
            "Change a key's limits, budget, scope or expiry", KeyView, body=KeyChanges, parameters=_NAME
        ),
        "delete": _admin("Revoke a key", KeyView, parameters=_NAME),
    },
    "/v1/admin/keys/{name}/revoke": {"post": _admin("Revoke a key", KeyView, parameters=_NAME)},
    "/v1/admin/keys/{name}/rotate": {
        "post": _admin(
            "A new secret; the old ones work for grace_s more", KeyView, body=RotateSpec, parameters=_NAME
        )
    },
    "/v1/admin/audit": {
        "get": _admin(
            "Who did what to which key, newest first",
            AuditList,
            parameters=[
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 10000},
                }
            ],
        )
    },
}
