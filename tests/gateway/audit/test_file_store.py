"""The JSONL file: one entry a line, fsync'd per append, and a reopened file continues its chain."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.audit.chain import verify
from gateway.audit.entry import Event
from gateway.audit.file_store import FileAuditStore
from gateway.audit.store import AuditStoreError


def _event(i: int) -> Event:
    return Event(at=float(i), actor="root", action="key.create", target=f"k{i}")


async def test_each_append_is_one_line_and_fsynced_before_it_returns(tmp_path: Path) -> None:
    synced: list[int] = []
    path = tmp_path / "audit" / "audit.jsonl"
    store = FileAuditStore(path, fsync=lambda fd: synced.append(path.read_bytes().count(b"\n")))
    for i in range(3):
        await store.append(_event(i))
    assert synced == [1, 2, 3]  # each fsync saw its own line already written
    assert path.stat().st_mode & 0o777 == 0o600
    assert verify(path.read_bytes().splitlines()).num_entries == 3


async def test_a_reopened_file_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = FileAuditStore(path)
    await first.append(_event(0))
    await first.close()
    entry = await FileAuditStore(path).append(_event(1))
    assert entry.seq == 1
    verdict = verify(await FileAuditStore(path).lines())
    assert verdict.is_intact and verdict.num_entries == 2 and verdict.head == entry.hash


async def test_two_stores_on_one_file_never_fork_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    a, b = FileAuditStore(path), FileAuditStore(path)  # two workers of one host
    await asyncio.gather(*(store.append(_event(i)) for i in range(10) for store in (a, b)))
    verdict = verify(await a.lines())
    assert verdict.is_intact and verdict.num_entries == 20


async def test_a_torn_last_line_stops_appends_instead_of_starting_a_new_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    store = FileAuditStore(path)
    await store.append(_event(0))
    with path.open("ab") as file:
        file.write(b'{"seq":1,"pr')
    with pytest.raises(AuditStoreError):
        await store.append(_event(1))


async def test_without_a_path_the_chain_is_kept_in_memory() -> None:
    store = FileAuditStore(None)
    for i in range(3):
        await store.append(_event(i))
    assert verify(await store.lines()).num_entries == 3
