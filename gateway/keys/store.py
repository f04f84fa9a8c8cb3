"""Where API-made keys live: ``KeyStore``, and ``FileKeyStore`` (this host; a file, or memory only).

Every store keeps a version that each change bumps: replicas poll it (``KeyRegistry``) and reload the
records only when it moved. A write names the revision it read (0: the key must not exist yet) and
is refused when another write got there first, so two admins never silently undo each other. The
audit entry is written with the change, in the same step.

``FileKeyStore(path)`` writes ``{"version", "records", "audit"}`` to ``path`` atomically (a temporary
file renamed over it) under an exclusive lock, so the workers of one host share it and ``make run``
keeps its keys across restarts; ``FileKeyStore(None)`` keeps them in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import msgspec

from gateway.keys.records import AuditEntry, KeyRecord

__all__ = ["FileKeyStore", "KeyStore", "WriteConflict"]


class WriteConflict(Exception):
    """The key changed (or appeared) since it was read."""


class KeyStore(Protocol):
    async def version(self) -> int:
        """A number every change increases."""
        ...

    async def load(self) -> tuple[int, list[KeyRecord]]:
        """Every record, and a version no newer than them."""
        ...

    async def put(self, record: KeyRecord, *, read_revision: int, audit: AuditEntry) -> None:
        """Store ``record`` and ``audit`` at once; WriteConflict unless the stored record's revision is
        ``read_revision`` (0: none stored)."""
        ...

    async def audit(self, limit: int) -> list[AuditEntry]:
        """The newest ``limit`` audit entries, newest first."""
        ...

    async def close(self) -> None: ...


class _Document(msgspec.Struct):
    version: int = 0
    records: dict[str, KeyRecord] = msgspec.field(default_factory=dict)
    audit: list[AuditEntry] = msgspec.field(default_factory=list)
    """Newest first."""


class FileKeyStore:
    """Keys in one JSON file shared by this host's workers (or in memory when ``path`` is None)."""

    def __init__(self, path: str | Path | None, *, max_audit_entries: int = 10_000) -> None:
        self.path = Path(path) if path is not None else None
        self.max_audit_entries = max_audit_entries
        self._doc = _Document()
        self._seen: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) of the file last read

    async def version(self) -> int:
        return (await asyncio.to_thread(self._read)).version

    async def load(self) -> tuple[int, list[KeyRecord]]:
        doc = await asyncio.to_thread(self._read)
        return doc.version, list(doc.records.values())

    async def put(self, record: KeyRecord, *, read_revision: int, audit: AuditEntry) -> None:
        await asyncio.to_thread(self._put, record, read_revision, audit)

    async def audit(self, limit: int) -> list[AuditEntry]:
        return (await asyncio.to_thread(self._read)).audit[:limit]

    async def close(self) -> None:
        return None

    def _put(self, record: KeyRecord, read_revision: int, audit: AuditEntry) -> None:
        with self._locked():
            doc = self._read()
            stored = doc.records.get(record.name)
            if (stored.revision if stored is not None else 0) != read_revision:
                raise WriteConflict(record.name)
            records = {**doc.records, record.name: record}
            new = _Document(doc.version + 1, records, [audit, *doc.audit][: self.max_audit_entries])
            self._write(new)

    def _read(self) -> _Document:
        """The file's document, parsed again only when the file changed."""
        if self.path is None:
            return self._doc
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return self._doc
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # each write renames a new file in
        if seen != self._seen:
            self._doc = msgspec.json.decode(self.path.read_bytes(), type=_Document)
            self._seen = seen
        return self._doc

    def _write(self, doc: _Document) -> None:
        if self.path is None:
            self._doc = doc
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(msgspec.json.encode(doc))
        os.chmod(tmp, 0o600)  # hashes only, but still nobody else's business
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
