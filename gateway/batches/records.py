"""The Files and Batch APIs' objects on the wire (OpenAI's shapes) and the ids they carry."""

from __future__ import annotations

import os
from typing import Any, Literal

import msgspec

from gateway.errors import InvalidRequest

BatchStatus = Literal[
    "validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled"
]
FINAL_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})
"""A batch in one of these is over: nothing runs, its files are written."""
URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
"""What a batch line may call (one of them a file)."""
COMPLETION_WINDOW_S = {"24h": 24 * 3600}
"""The completion windows OpenAI accepts, in seconds."""


def new_id(prefix: str) -> str:
    """``file-...``, ``batch_...``, ``batch_req_...``: a prefix and 24 random hex digits."""
    return f"{prefix}{os.urandom(12).hex()}"


class FileObject(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's file object (``GET /v1/files/{id}``)."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    object: str = "file"
    status: str = "processed"
    status_details: str | None = None
    expires_at: int | None = None


class RequestCounts(msgspec.Struct, frozen=True):
    """A batch's lines: in all, answered with a 2xx, and answered otherwise."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchObject(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's batch object (``GET /v1/batches/{id}``)."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: BatchStatus
    created_at: int
    expires_at: int
    request_counts: RequestCounts
    object: str = "batch"
    errors: dict[str, Any] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    metadata: dict[str, str] | None = None


class BatchDoc(msgspec.Struct, frozen=True, kw_only=True):
    """What never changes about a batch once it is made: its owner, its input and its window."""

    id: str
    tenant: str
    key_sha256: str | None
    """The creator's key: its lines run as that key, under its limits and budgets (None: anonymous)."""
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None = None


class StoredBatch(msgspec.Struct, kw_only=True):
    """A batch as the state holds it: its doc and the fields that change as it runs."""

    doc: BatchDoc
    status: BatchStatus
    total: int
    completed: int = 0
    failed: int = 0
    times: dict[str, int] = msgspec.field(default_factory=dict)
    """``in_progress_at``, ``cancelling_at``, ... as they happened (Unix seconds)."""
    output_file_id: str | None = None
    error_file_id: str | None = None

    def to_object(self) -> BatchObject:
        doc, times = self.doc, self.times
        return BatchObject(
            id=doc.id,
            endpoint=doc.endpoint,
            input_file_id=doc.input_file_id,
            completion_window=doc.completion_window,
            status=self.status,
            created_at=doc.created_at,
            expires_at=doc.expires_at,
            request_counts=RequestCounts(self.total, self.completed, self.failed),
            output_file_id=self.output_file_id,
            error_file_id=self.error_file_id,
            in_progress_at=times.get("in_progress_at"),
            finalizing_at=times.get("finalizing_at"),
            completed_at=times.get("completed_at"),
            failed_at=times.get("failed_at"),
            expired_at=times.get("expired_at"),
            cancelling_at=times.get("cancelling_at"),
            cancelled_at=times.get("cancelled_at"),
            metadata=doc.metadata,
        )


class LineResult(msgspec.Struct, frozen=True):
    """One line's answer as recorded (once): the status the pipeline gave and the body it sent."""

    request_id: str
    status_code: int
    body: msgspec.Raw

    @property
    def is_ok(self) -> bool:
        return 200 <= self.status_code < 300


def page(items: list[Any], query: dict[str, str], id_of: Any, *, default_limit: int) -> dict[str, Any]:
    """OpenAI's list shape over ``items`` (newest first already): ``limit`` 1..100 and an ``after`` id."""
    limit_text = query.get("limit", str(default_limit))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 10_000:
        raise InvalidRequest("limit must be a positive integer.", param="limit")
    after = query.get("after")
    if after is not None:
        ids = [id_of(item) for item in items]
        if after in ids:
            items = items[ids.index(after) + 1 :]
    chosen = items[: int(limit_text)]
    return {
        "object": "list",
        "data": chosen,
        "first_id": id_of(chosen[0]) if chosen else None,
        "last_id": id_of(chosen[-1]) if chosen else None,
        "has_more": len(items) > len(chosen),
    }
