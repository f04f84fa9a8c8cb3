"""The console's part of the OpenAPI document (``gateway.openapi`` merges it into ``GET /openapi.json``).

``CONSOLE_STRUCTS`` are the JSON endpoints' bodies (their schemas become components) and
``CONSOLE_PATHS`` the operations, the page included: every route the gateway answers is documented, so
``tests/gateway/test_openapi.py`` and the schemathesis suite hold these routes to the document too.
"""

from __future__ import annotations

from typing import Any

from gateway.console.routes import CONSOLE_PATH
from gateway.console.views import ExplainRequest, ExplainView, PolicyView, PoolsView

__all__ = ["CONSOLE_PATHS", "CONSOLE_STRUCTS"]

CONSOLE_STRUCTS = (PoolsView, ExplainRequest, ExplainView, PolicyView)
_JSON = "application/json"


def _ref(struct: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{struct.__name__}"}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }


def _admin(summary: str, response: type, **errors: dict[str, Any]) -> dict[str, Any]:
    """One admin-only operation answering ``response``."""
    return {
        "summary": summary + " (admin keys only)",
        "responses": {
            "200": {"description": "Done.", "content": {_JSON: {"schema": _ref(response)}}},
            "401": _error("No API key, or an unknown one (invalid_api_key)."),
            "403": _error("No role allowed here (admin_key_required, insufficient_role)."),
            "429": _error("Too many failed authentications from this address (too_many_auth_failures)."),
            **errors,
        },
    }


_explain = _admin(
    "Which pool model auto would pick for a prompt, and why",
    ExplainView,
    **{
        "400": _error("An invalid body (invalid_json, invalid_request)."),
        "404": _error("The policy has no tier classifier (classifier_not_configured)."),
    },
)
_explain["requestBody"] = {"required": True, "content": {_JSON: {"schema": _ref(ExplainRequest)}}}

CONSOLE_PATHS: dict[str, dict[str, Any]] = {
    CONSOLE_PATH: {
        "get": {
            "summary": "The web console (an HTML page holding no data; it asks for an admin key)",
            "security": [],
            "responses": {
                "200": {"description": "The page.", "content": {"text/html": {"schema": {"type": "string"}}}},
                "429": _error("Too many requests from this address (rate_limit_exceeded)."),
            },
        }
    },
    "/v1/admin/pools": {
        "get": _admin("Pools and replicas now: health, breaker state, load, recent latency", PoolsView)
    },
    "/v1/admin/route/explain": {"post": _explain},
    "/v1/admin/policy": {
        "get": _admin("The serving policy, without secrets, and when it was loaded", PolicyView)
    },
}
