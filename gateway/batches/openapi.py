"""The Files and Batch APIs' part of the OpenAPI document (``gateway.openapi`` merges it into
``GET /openapi.json``): ``BATCH_PATHS`` and the bodies' structs, ``BATCH_STRUCTS``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.batches.records import URLS, BatchObject, FileObject

__all__ = ["BATCH_PATHS", "BATCH_STRUCTS", "BatchList", "CreateBatch", "DeletedFile", "FileList"]

_JSON = "application/json"


class FileList(msgspec.Struct):
    """A page of the tenant's files."""

    object: str
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class BatchList(msgspec.Struct):
    """A page of the tenant's batches, newest first."""

    object: str
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class DeletedFile(msgspec.Struct):
    """What deleting a file answers."""

    id: str
    object: str
    deleted: bool


Endpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
"""``records.URLS`` (a test holds the two equal)."""


class CreateBatch(msgspec.Struct):
    """``POST /v1/batches``'s body."""

    input_file_id: Annotated[str, msgspec.Meta(min_length=1)]
    endpoint: Endpoint
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None


BATCH_STRUCTS = (FileObject, FileList, DeletedFile, BatchObject, BatchList, CreateBatch)


def _ok(name: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def _error(description: str) -> dict[str, Any]:
    return _ok("ErrorEnvelope", description)


def _path_id(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_AUTH_ERRORS = {
    "401": _error("No API key, or an unknown one (invalid_api_key)."),
    "429": _error("Too many failed authentications from this address (too_many_auth_failures)."),
    "503": _error("The batch store cannot answer (store_unavailable)."),
}
_NOT_FOUND = {"404": _error("No such id for the caller's tenant (not_found).")}
_PAGE = [
    {"name": "limit", "in": "query", "schema": {"type": "string", "pattern": "^[1-9][0-9]{0,3}$"}},
    {"name": "after", "in": "query", "schema": {"type": "string"}},
]
_UPLOAD = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file", "purpose"],
                "properties": {
                    "file": {
                        "type": "string",
                        "format": "binary",
                        "description": "JSON lines, one request a line.",
                    },
                    "purpose": {"type": "string", "enum": ["batch"]},
                },
            }
        }
    },
}
_CREATE = {
    "required": True,
    "content": {
        _JSON: {
            "schema": {
                "$ref": "#/components/schemas/CreateBatch",
            },
            "example": {"input_file_id": "file-...", "endpoint": URLS[0], "completion_window": "24h"},
        }
    },
}

BATCH_PATHS: dict[str, dict[str, Any]] = {
    "/v1/files": {
        "post": {
            "summary": "Upload a batch input file (checked line by line)",
            "requestBody": _UPLOAD,
            "responses": {
                "200": _ok("FileObject", "The file."),
                "400": _error("A bad line (invalid_batch_line, the message names it) or purpose."),
                "413": _error("Over the policy's batches.max_file_bytes (request_too_large)."),
                **_AUTH_ERRORS,
            },
        },
        "get": {
            "summary": "List the tenant's files",
            "parameters": [
                {"name": "purpose", "in": "query", "schema": {"type": "string"}},
                {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
                *_PAGE,
            ],
            "responses": {
                "200": _ok("FileList", "The files."),
                "400": _error("A bad limit."),
                **_AUTH_ERRORS,
            },
        },
    },
    "/v1/files/{file_id}": {
        "get": {
            "summary": "Retrieve a file object",
            "parameters": [_path_id("file_id")],
            "responses": {"200": _ok("FileObject", "The file."), **_NOT_FOUND, **_AUTH_ERRORS},
        },
        "delete": {
            "summary": "Delete a file",
            "parameters": [_path_id("file_id")],
            "responses": {"200": _ok("DeletedFile", "Deleted."), **_NOT_FOUND, **_AUTH_ERRORS},
        },
    },
    "/v1/files/{file_id}/content": {
        "get": {
            "summary": "A file's bytes",
            "parameters": [_path_id("file_id")],
            "responses": {
                "200": {
                    "description": "JSON lines.",
                    "content": {"application/jsonl": {"schema": {"type": "string"}}},
                },
                **_NOT_FOUND,
                **_AUTH_ERRORS,
            },
        }
    },
    "/v1/batches": {
        "post": {
            "summary": "Create a batch of an uploaded file",
            "requestBody": _CREATE,
            "responses": {
                "200": _ok("BatchObject", "The batch (validating)."),
                "400": _error("A bad endpoint, completion_window, metadata or body."),
                **_NOT_FOUND,
                **_AUTH_ERRORS,
            },
        },
        "get": {
            "summary": "List the tenant's batches",
            "parameters": _PAGE,
            "responses": {
                "200": _ok("BatchList", "The batches."),
                "400": _error("A bad limit."),
                **_AUTH_ERRORS,
            },
        },
    },
    "/v1/batches/{batch_id}": {
        "get": {
            "summary": "Retrieve a batch",
            "parameters": [_path_id("batch_id")],
            "responses": {"200": _ok("BatchObject", "The batch."), **_NOT_FOUND, **_AUTH_ERRORS},
        }
    },
    "/v1/batches/{batch_id}/cancel": {
        "post": {
            "summary": "Cancel a batch",
            "parameters": [_path_id("batch_id")],
            "responses": {
                "200": _ok("BatchObject", "The batch (cancelling, or cancelled)."),
                "400": _error("The batch is over already (invalid_state)."),
                **_NOT_FOUND,
                **_AUTH_ERRORS,
            },
        }
    },
}
