"""Where batches and file metadata live while gateways work on them: ``BatchState``, and its
in-process twin ``MemoryBatchState`` (``redis_state.RedisBatchState`` shares them between gateways).

A batch's lines are claimed, run and recorded::

    claim(n)   the next unclaimed lines, or lines whose claim lease ran out (their gateway died),
               each leased to the caller for ``lease_s``; a ``validating`` batch turns ``in_progress``
    record     a line's result, written once: a line with a result is never claimed again
    release    a line handed back to be claimed again later (a 429: wait, then retry)
    begin_finalizing   exactly one caller wins the right to write the output files, when every line
               has a result (``completed``), the window is past (``expired``) or a cancel has no line
               in flight any more (``cancelled``); a finalizer that died is taken over after a lease
    finish     the final status and the output files, once
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.batches.records import FileObject, StoredBatch


class BatchState(Protocol):
    """Files' metadata (per tenant), batches and their lines, claims and results."""

    async def put_file(self, tenant: str, file: FileObject) -> None: ...

    async def get_file(self, tenant: str, file_id: str) -> FileObject | None: ...

    async def list_files(self, tenant: str) -> list[FileObject]:
        """The tenant's files, newest first."""
        ...

    async def delete_file(self, tenant: str, file_id: str) -> bool: ...

    async def create(self, batch: StoredBatch, lines: list[bytes]) -> None:
        """Keep a new batch (``validating``) and its encoded ``BatchLine`` s; it becomes active."""
        ...

    async def get(self, batch_id: str) -> StoredBatch | None: ...

    async def list_batches(self, tenant: str) -> list[StoredBatch]:
        """The tenant's batches, newest first."""
        ...

    async def active(self) -> list[str]:
        """Batches not over yet (and some just over: ``forget`` them)."""
        ...

    async def forget(self, batch_id: str) -> None:
        """No longer active (it is over)."""
        ...

    async def claim(self, batch_id: str, now_s: float, lease_s: float, n: int) -> list[tuple[int, bytes]]:
        """Up to ``n`` lines (index, encoded line) leased to the caller until ``now_s + lease_s``;
        none unless the batch is ``validating`` or ``in_progress``."""
        ...

    async def record(self, batch_id: str, index: int, result: bytes, is_ok: bool) -> bool:
        """Write line ``index``'s result once; False when it had one or the batch is past recording."""
        ...

    async def release(self, batch_id: str, index: int, not_before_s: float) -> None:
        """Hand a claimed line back: claimable again from ``not_before_s``."""
        ...

    async def cancel(self, batch_id: str, now_s: float) -> bool:
        """``validating``/``in_progress`` -> ``cancelling``; False when it was neither."""
        ...

    async def begin_finalizing(
        self, batch_id: str, now_s: float, lease_s: float, is_expired: bool
    ) -> str | None:
        """The final status this caller must write (it alone), or None (not due, or another is on it)."""
        ...

    async def lines_and_results(self, batch_id: str) -> tuple[list[bytes], dict[int, bytes]]: ...

    async def finish(
        self, batch_id: str, final: str, now_s: float, output_file_id: str | None, error_file_id: str | None
    ) -> bool:
        """``finalizing`` -> ``final`` with its files; False when it was not finalizing (lost to another)."""
        ...

    async def close(self) -> None: ...


@dataclass
class _Batch:
    stored: StoredBatch
    lines: list[bytes]
    results: dict[int, bytes] = field(default_factory=dict)
    claims: dict[int, float] = field(default_factory=dict)
    """Claimed lines without a result -> when their lease ends."""
    next_index: int = 0
    final: str | None = None
    finalizing_since: float = 0.0


class MemoryBatchState:
    """``BatchState`` in this process (one gateway; lost on restart). Each method runs without an
    await in between, so it is as atomic as the Redis scripts it mirrors."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, FileObject]] = {}
        self._batches: dict[str, _Batch] = {}
        self._active: set[str] = set()

    async def put_file(self, tenant: str, file: FileObject) -> None:
        self._files.setdefault(tenant, {})[file.id] = file

    async def get_file(self, tenant: str, file_id: str) -> FileObject | None:
        return self._files.get(tenant, {}).get(file_id)

    async def list_files(self, tenant: str) -> list[FileObject]:
        return list(self._files.get(tenant, {}).values())[::-1]

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        return self._files.get(tenant, {}).pop(file_id, None) is not None

    async def create(self, batch: StoredBatch, lines: list[bytes]) -> None:
        self._batches[batch.doc.id] = _Batch(batch, lines)
        self._active.add(batch.doc.id)

    async def get(self, batch_id: str) -> StoredBatch | None:
        found = self._batches.get(batch_id)
        return found.stored if found is not None else None

    async def list_batches(self, tenant: str) -> list[StoredBatch]:
        mine = [b.stored for b in self._batches.values() if b.stored.doc.tenant == tenant]
        return mine[::-1]  # dicts keep the order they were made in

    async def active(self) -> list[str]:
        return list(self._active)

    async def forget(self, batch_id: str) -> None:
        self._active.discard(batch_id)

    async def claim(self, batch_id: str, now_s: float, lease_s: float, n: int) -> list[tuple[int, bytes]]:
        batch = self._batches.get(batch_id)
        if batch is None:
            return []
        stored = batch.stored
        if stored.status == "validating":
            stored.status = "in_progress"
            stored.times["in_progress_at"] = int(now_s)
        if stored.status != "in_progress":
            return []
        claimed: list[tuple[int, bytes]] = []
        for index, until in sorted(batch.claims.items(), key=lambda item: item[1]):
            if len(claimed) >= n or until > now_s:
                break
            batch.claims[index] = now_s + lease_s  # its gateway died, or it waited out a 429
            claimed.append((index, batch.lines[index]))
        while len(claimed) < n and batch.next_index < stored.total:
            index = batch.next_index
            batch.next_index += 1
            batch.claims[index] = now_s + lease_s
            claimed.append((index, batch.lines[index]))
        return claimed

    async def record(self, batch_id: str, index: int, result: bytes, is_ok: bool) -> bool:
        batch = self._batches.get(batch_id)
        if batch is None or batch.stored.status not in ("in_progress", "cancelling"):
            return False
        if index in batch.results:
            return False
        batch.results[index] = result
        batch.claims.pop(index, None)
        if is_ok:
            batch.stored.completed += 1
        else:
            batch.stored.failed += 1
        return True

    async def release(self, batch_id: str, index: int, not_before_s: float) -> None:
        batch = self._batches.get(batch_id)
        if batch is not None and index in batch.claims:
            batch.claims[index] = not_before_s

    async def cancel(self, batch_id: str, now_s: float) -> bool:
        batch = self._batches.get(batch_id)
        if batch is None or batch.stored.status not in ("validating", "in_progress"):
            return False
        batch.stored.status = "cancelling"
        batch.stored.times["cancelling_at"] = int(now_s)
        return True

    async def begin_finalizing(
        self, batch_id: str, now_s: float, lease_s: float, is_expired: bool
    ) -> str | None:
        batch = self._batches.get(batch_id)
        if batch is None:
            return None
        stored = batch.stored
        if stored.status == "finalizing":
            if batch.finalizing_since + lease_s > now_s:
                return None  # another is writing the files
            batch.finalizing_since = now_s  # it died: taken over
            return batch.final
        if stored.status not in ("in_progress", "cancelling", "validating"):
            return None
        if stored.completed + stored.failed >= stored.total:
            final = "completed"
        elif is_expired:
            final = "expired"
        elif stored.status == "cancelling" and all(until <= now_s for until in batch.claims.values()):
            final = "cancelled"
        else:
            return None
        stored.status = "finalizing"
        stored.times["finalizing_at"] = int(now_s)
        batch.final, batch.finalizing_since = final, now_s
        return final

    async def lines_and_results(self, batch_id: str) -> tuple[list[bytes], dict[int, bytes]]:
        batch = self._batches[batch_id]
        return batch.lines, dict(batch.results)

    async def finish(
        self, batch_id: str, final: str, now_s: float, output_file_id: str | None, error_file_id: str | None
    ) -> bool:
        batch = self._batches.get(batch_id)
        if batch is None or batch.stored.status != "finalizing":
            return False
        stored = batch.stored
        stored.status = final  # type: ignore[assignment]  # one of the final statuses
        stored.times[f"{final}_at"] = int(now_s)
        stored.output_file_id, stored.error_file_id = output_file_id, error_file_id
        batch.lines, batch.results, batch.claims = [], {}, {}
        return True

    async def close(self) -> None:
        pass
