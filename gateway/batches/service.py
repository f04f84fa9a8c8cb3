"""``BatchService``: what the routes and the runner ask of batches: upload, create, read, list, cancel,
and finalize (the output and error files written once, in input order)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gateway.batches.files import FileStore
from gateway.batches.jsonl import BatchLine, ParsedFile, error_line, output_line, read_batch_file
from gateway.batches.records import (
    COMPLETION_WINDOW_S,
    URLS,
    BatchDoc,
    FileObject,
    LineResult,
    StoredBatch,
    new_id,
)
from gateway.batches.state import BatchState
from gateway.errors import InvalidRequest, NotFound
from gateway.policy.batches import BatchesConfig

__all__ = ["BatchService"]

MAX_METADATA_PAIRS = 16
_EXPIRED = "This request could not be executed before the completion window expired."
_decode_line = msgspec.json.Decoder(BatchLine).decode
_decode_result = msgspec.json.Decoder(LineResult).decode


def _check_metadata(metadata: Any) -> dict[str, str] | None:
    if metadata is None:
        return None
    is_valid = (
        isinstance(metadata, dict)
        and len(metadata) <= MAX_METADATA_PAIRS
        and all(isinstance(k, str) and len(k) <= 64 for k in metadata)
        and all(isinstance(v, str) and len(v) <= 512 for v in metadata.values())
    )
    if not is_valid:
        raise InvalidRequest(
            f"metadata: at most {MAX_METADATA_PAIRS} pairs of strings (keys up to 64 characters, values up "
            "to 512).",
            param="metadata",
            code="invalid_value",
        )
    return dict(metadata)


async def _read_off_loop(data: bytes, config: BatchesConfig) -> ParsedFile:
    """The file checked line by line in a worker thread: 50,000 lines take ~0.3 s, which the event loop
    spends serving other requests meanwhile."""
    return await asyncio.to_thread(
        read_batch_file, data, max_lines=config.max_lines, max_bytes=config.max_file_bytes
    )


class BatchService:
    """Batches and their files over a ``BatchState``; ``clock`` (Unix seconds) is injectable."""

    def __init__(
        self, state: BatchState, files_dir: str | Path, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.state = state
        self.clock = clock
        self.files = FileStore(state, Path(files_dir), clock)

    async def upload(
        self, tenant: str, filename: str, purpose: str, data: bytes, config: BatchesConfig
    ) -> FileObject:
        """A batch input file, checked line by line (400 naming the first bad line)."""
        if purpose != "batch":
            raise InvalidRequest(
                f"Invalid value for 'purpose': '{purpose}'. This gateway accepts 'batch' only.",
                param="purpose",
                code="invalid_value",
            )
        await _read_off_loop(data, config)
        return await self.files.add(tenant, filename, purpose, data)

    async def create(
        self, tenant: str, key_sha256: str | None, body: dict[str, Any], config: BatchesConfig
    ) -> StoredBatch:
        """A new batch of the tenant's input file, run as the key ``key_sha256``."""
        input_file_id, endpoint = body.get("input_file_id"), body.get("endpoint")
        window = body.get("completion_window")
        if not isinstance(input_file_id, str):
            raise InvalidRequest("Missing required parameter: 'input_file_id'.", param="input_file_id")
        if not isinstance(endpoint, str) or endpoint not in URLS:
            raise InvalidRequest(f"endpoint must be one of {', '.join(URLS)}.", param="endpoint")
        if not isinstance(window, str) or window not in COMPLETION_WINDOW_S:
            raise InvalidRequest("completion_window must be '24h'.", param="completion_window")
        metadata = _check_metadata(body.get("metadata"))
        file = await self.files.get(tenant, input_file_id)
        if file.purpose != "batch":
            raise InvalidRequest(f"File {input_file_id} is not a batch input file.", param="input_file_id")
        data = await self.files.content(tenant, input_file_id)
        parsed = await _read_off_loop(data, config)
        if parsed.url != endpoint:
            raise InvalidRequest(
                f"The file's requests are for {parsed.url}, not the batch's endpoint {endpoint}.",
                param="endpoint",
            )
        now = int(self.clock())
        doc = BatchDoc(
            id=new_id("batch_"),
            tenant=tenant,
            key_sha256=key_sha256,
            endpoint=endpoint,
            input_file_id=input_file_id,
            completion_window=window,
            created_at=now,
            expires_at=now + COMPLETION_WINDOW_S[window],
            metadata=metadata,
        )
        batch = StoredBatch(doc=doc, status="validating", total=len(parsed.lines))
        await self.state.create(batch, [msgspec.json.encode(line) for line in parsed.lines])
        return batch

    async def get(self, tenant: str, batch_id: str) -> StoredBatch:
        """The tenant's batch; NotFound (404) for any other id."""
        batch = await self.state.get(batch_id)
        if batch is None or batch.doc.tenant != tenant:
            raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id", code="not_found")
        return batch

    async def list_batches(self, tenant: str) -> list[StoredBatch]:
        return await self.state.list_batches(tenant)

    async def cancel(self, tenant: str, batch_id: str) -> StoredBatch:
        """Stop claiming the batch's lines: ``cancelling``, then ``cancelled`` once those in flight end."""
        batch = await self.get(tenant, batch_id)
        if not await self.state.cancel(batch_id, self.clock()) and batch.status not in (
            "cancelling",
            "cancelled",
        ):
            raise InvalidRequest(
                f"Cannot cancel a batch that is {batch.status}.", param="batch_id", code="invalid_state"
            )
        return await self.get(tenant, batch_id)

    async def finalize(self, batch: StoredBatch, lease_s: float) -> str | None:
        """Write the batch's files and final status when it is due and no other gateway is on it: the
        final status, or None."""
        batch_id = batch.doc.id
        now = self.clock()
        final = await self.state.begin_finalizing(batch_id, now, lease_s, now >= batch.doc.expires_at)
        if final is None:
            return None
        lines, results = await self.state.lines_and_results(batch_id)
        output: list[bytes] = []
        errors: list[bytes] = []
        for index, encoded in enumerate(lines):
            line = _decode_line(encoded)
            if index in results:
                result = _decode_result(results[index])
                (output if result.is_ok else errors).append(output_line(line.custom_id, result))
            elif final == "expired":
                errors.append(error_line(line.custom_id, "batch_expired", _EXPIRED))
        tenant = batch.doc.tenant
        written = [
            await self.files.add(tenant, f"{batch_id}_{name}.jsonl", "batch_output", b"\n".join(part) + b"\n")
            if part
            else None
            for name, part in (("output", output), ("error", errors))
        ]
        ids = [file.id if file is not None else None for file in written]
        if not await self.state.finish(batch_id, final, self.clock(), ids[0], ids[1]):
            for file_id in ids:  # another gateway took over and finished first: its files stand
                if file_id is not None:
                    await self.files.delete(tenant, file_id)
            return None
        await self.state.forget(batch_id)
        return final

    async def close(self) -> None:
        await self.state.close()
