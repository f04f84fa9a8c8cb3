"""Uploaded files and batch output files: their bytes in a directory, their metadata in the batch state
(per tenant: another tenant's file is not found)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from gateway.batches.records import FileObject, new_id
from gateway.batches.state import BatchState
from gateway.errors import NotFound

__all__ = ["FileStore"]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)  # a reader never sees half a file


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


class FileStore:
    """Files by id, for one tenant at a time; the disk work runs off the event loop."""

    def __init__(self, state: BatchState, directory: Path, clock: Callable[[], float]) -> None:
        self.state = state
        self.directory = directory
        self.clock = clock

    def _path(self, file_id: str) -> Path:
        return self.directory / f"{file_id}.jsonl"

    async def add(self, tenant: str, filename: str, purpose: str, data: bytes) -> FileObject:
        file = FileObject(
            id=new_id("file-"),
            bytes=len(data),
            created_at=int(self.clock()),
            filename=filename,
            purpose=purpose,
        )
        await asyncio.to_thread(_write, self._path(file.id), data)
        await self.state.put_file(tenant, file)
        return file

    async def get(self, tenant: str, file_id: str) -> FileObject:
        """The tenant's file; NotFound (404) for any other id."""
        file = await self.state.get_file(tenant, file_id)
        if file is None:
            raise NotFound(f"No such File object: {file_id}", param="file_id", code="not_found")
        return file

    async def content(self, tenant: str, file_id: str) -> bytes:
        await self.get(tenant, file_id)
        try:
            return await asyncio.to_thread(self._path(file_id).read_bytes)
        except FileNotFoundError:  # its metadata outlived its bytes (another host's directory)
            raise NotFound(f"The content of file {file_id} is gone.", param="file_id") from None

    async def list_files(self, tenant: str, purpose: str | None = None) -> list[FileObject]:
        files = await self.state.list_files(tenant)
        return [file for file in files if purpose is None or file.purpose == purpose]

    async def delete(self, tenant: str, file_id: str) -> None:
        await self.get(tenant, file_id)
        await self.state.delete_file(tenant, file_id)
        await asyncio.to_thread(_remove, self._path(file_id))
