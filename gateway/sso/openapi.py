"""The console sign-in routes' part of the OpenAPI document (``gateway.openapi`` merges it in), so
``tests/gateway/test_openapi.py`` holds them to the document like every other route."""

from __future__ import annotations

from typing import Any

from gateway.sso.routes import CALLBACK_PATH, LOGIN_PATH, LOGOUT_PATH

__all__ = ["SSO_PATHS"]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }


_OFF = _error("The policy has no sso section (not_found).")
_SECRET = _error("No cookie-signing secret in the environment (sso_misconfigured).")

SSO_PATHS: dict[str, dict[str, Any]] = {
    LOGIN_PATH: {
        "get": {
            "summary": "Start the console's single sign-on: a redirect to the OpenID provider (code + PKCE)",
            "security": [],
            "responses": {
                "302": {"description": "To the provider's authorization endpoint."},
                "404": _OFF,
                "503": _SECRET,
            },
        }
    },
    CALLBACK_PATH: {
        "get": {
            "summary": "The provider's redirect back: sets the session and CSRF cookies",
            "security": [],
            "parameters": [
                {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
                for name in ("code", "state", "error")
            ],
            "responses": {
                "302": {"description": "To /console, signed in."},
                "401": _error(
                    "A wrong state, code, ID token or nonce, or no login in progress (invalid_token)."
                ),
                "403": _error("The user's groups map to no role (no_role)."),
                "404": _OFF,
                "503": _SECRET,
            },
        }
    },
    LOGOUT_PATH: {
        "post": {
            "summary": "End the console session (clears its cookies)",
            "security": [],
            "responses": {
                "200": {
                    "description": "Signed out.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "403": _error("A session cookie without its x-csrf-token header (csrf_failed)."),
                "404": _OFF,
            },
        }
    },
}
