"""FileAuditStore: the chain as a JSONL file on this host (or in memory when no path is given).

One entry a line, appended under an exclusive lock (``flock``; this host's workers share the file)
after reading the last line, then ``fsync``'d before the append returns: an entry the caller saw
written survives a crash. A torn last line (a crash mid-write) stops further appends with
``AuditStoreError`` rather than start a second chain; ``sortyard audit verify`` names it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import msgspec

from gateway.audit.chain import decode_entry
from gateway.audit.entry import Entry, Event, link
from gateway.audit.store import AuditStoreError

__all__ = ["FileAuditStore"]

_CHUNK = 4096


class FileAuditStore:
    """The chain in ``path`` (created with mode 0600), or in memory when ``path`` is None."""

    def __init__(self, path: str | Path | None, *, fsync: Callable[[int], None] = os.fsync) -> None:
        self.path = Path(path) if path is not None else None
        self.fsync = fsync
        """Called with the file's descriptor after each append (injected by tests)."""
        self._memory: list[bytes] = []
        self._lock = asyncio.Lock()  # one append at a time in this process; flock orders processes

    async def append(self, event: Event) -> Entry:
        async with self._lock:
            if self.path is None:
                tail = decode_entry(self._memory[-1]) if self._memory else None
                entry = link(event, tail)
                self._memory.append(msgspec.json.encode(entry))
                return entry
            return await asyncio.to_thread(self._append, event)

    async def lines(self) -> list[bytes]:
        if self.path is None:
            return list(self._memory)
        return await asyncio.to_thread(self._read)

    async def close(self) -> None:
        return None

    def _read(self) -> list[bytes]:
        assert self.path is not None
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return [line for line in data.split(b"\n") if line.strip()]

    def _append(self, event: Event) -> Entry:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+b") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                last = _last_line(file)
                try:
                    tail = decode_entry(last) if last else None
                except (msgspec.DecodeError, msgspec.ValidationError):
                    raise AuditStoreError(f"{self.path}: the last line is not an entry") from None
                entry = link(event, tail)
                file.write(msgspec.json.encode(entry) + b"\n")
                file.flush()
                self.fsync(file.fileno())
                return entry
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)


def _last_line(file: BinaryIO) -> bytes:
    """The file's last non-empty line, read backwards from the end (the file only grows)."""
    end = file.seek(0, os.SEEK_END)
    data, position = b"", end
    while position > 0:
        step = min(_CHUNK, position)
        position -= step
        file.seek(position)
        data = file.read(step) + data
        stripped = data.rstrip(b"\n")
        if b"\n" in stripped:
            return stripped.rsplit(b"\n", 1)[1]
    return data.strip(b"\n")
