"""The stored responses' part of the OpenAPI document (``gateway.openapi`` merges it into
``GET /openapi.json``): ``RESPONSE_PATHS`` and the bodies' structs, ``RESPONSE_STRUCTS``."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["RESPONSE_PATHS", "RESPONSE_STRUCTS", "DeletedResponse", "InputItemList"]

_JSON = "application/json"


class InputItemList(msgspec.Struct):
    """A page of a stored response's input items."""

    object: str
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class DeletedResponse(msgspec.Struct):
    """What deleting a stored response answers."""

    id: str
    object: str
    deleted: bool


RESPONSE_STRUCTS = (InputItemList, DeletedResponse)


def _ok(name: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def _error(description: str) -> dict[str, Any]:
    return _ok("ErrorEnvelope", description)


_ID = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
_ERRORS = {
    "401": _error("No API key, or an unknown one (invalid_api_key)."),
    "404": _error("No response with this id for the caller's tenant (not_found)."),
    "429": _error("Too many failed authentications from this address (too_many_auth_failures)."),
}

RESPONSE_PATHS: dict[str, dict[str, Any]] = {
    "/v1/responses/{response_id}": {
        "get": {
            "summary": "Retrieve a stored response",
            "parameters": [_ID],
            "responses": {"200": _ok("ResponseObject", "The response."), **_ERRORS},
        },
        "delete": {
            "summary": "Delete a stored response",
            "parameters": [_ID],
            "responses": {"200": _ok("DeletedResponse", "Deleted."), **_ERRORS},
        },
    },
    "/v1/responses/{response_id}/input_items": {
        "get": {
            "summary": "List a stored response's input items",
            "parameters": [
                _ID,
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "string", "pattern": "^([1-9][0-9]?|100)$"},
                    "description": "1 to 100 items; 20 when left out.",
                },
                {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
                {"name": "after", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": _ok("InputItemList", "The items."),
                "400": _error("A bad limit, order or after (invalid_request)."),
                **_ERRORS,
            },
        }
    },
}
