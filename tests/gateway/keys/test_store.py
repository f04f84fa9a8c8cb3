"""Every key store (memory, a file, a real Redis) keeps records, a version, and the audit trail alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.keys import AuditEntry, FileKeyStore, KeyRecord, KeyStore, Secret, WriteConflict
from gateway.keys.redis_store import RedisKeyStore


def _record(name: str = "ci", revision: int = 1, tenant: str = "team-a") -> KeyRecord:
    return KeyRecord(name, tenant, (Secret("a" * 64),), created_at=1.0, created_by="root", revision=revision)


def _entry(action: str = "create", key: str = "ci") -> AuditEntry:
    return AuditEntry(2.0, "root", action, key, "team-a")  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "file", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyStore]:
    made: KeyStore
    if request.param == "memory":
        made = FileKeyStore(None, max_audit_entries=3)
    elif request.param == "file":
        made = FileKeyStore(tmp_path / "keys.json", max_audit_entries=3)
    else:
        url = request.getfixturevalue("redis_flushed")
        made = RedisKeyStore.from_url(url, max_audit_entries=3)
    yield made
    await made.close()


async def test_a_record_is_stored_with_its_audit_entry_and_bumps_the_version(store: KeyStore) -> None:
    assert await store.load() == (0, [])
    await store.put(_record(), read_revision=0, audit=_entry())
    version, records = await store.load()
    assert version == await store.version() == 1 and records == [_record()]
    assert await store.audit(10) == [_entry()]


async def test_a_write_that_read_an_older_revision_is_refused(store: KeyStore) -> None:
    await store.put(_record(), read_revision=0, audit=_entry())
    with pytest.raises(WriteConflict):  # the name is taken
        await store.put(_record(), read_revision=0, audit=_entry())
    await store.put(_record(revision=2), read_revision=1, audit=_entry("update"))
    with pytest.raises(WriteConflict):  # someone else's update came first
        await store.put(_record(revision=2, tenant="team-b"), read_revision=1, audit=_entry("update"))
    with pytest.raises(WriteConflict):  # no such key to update
        await store.put(_record("other", revision=2), read_revision=1, audit=_entry("update"))
    assert (await store.load())[1] == [_record(revision=2)]
    assert await store.version() == 2


async def test_the_audit_trail_is_newest_first_and_bounded(store: KeyStore) -> None:
    for i in range(5):
        await store.put(_record(f"k{i}"), read_revision=0, audit=_entry(key=f"k{i}"))
    assert [entry.key for entry in await store.audit(10)] == ["k4", "k3", "k2"]
    assert [entry.key for entry in await store.audit(1)] == ["k4"]


async def test_the_workers_of_one_host_share_the_keys_file_and_it_outlives_them(tmp_path: Path) -> None:
    path = tmp_path / "state" / "keys.json"
    first, second = FileKeyStore(path), FileKeyStore(path)
    await first.put(_record(), read_revision=0, audit=_entry())
    assert (await second.load())[1] == [_record()]
    await second.put(_record(revision=2), read_revision=1, audit=_entry("update"))
    with pytest.raises(WriteConflict):  # first's view is stale: the file says revision 2
        await first.put(_record(revision=2), read_revision=1, audit=_entry("update"))
    restarted = FileKeyStore(path)
    assert await restarted.load() == (2, [_record(revision=2)])
    assert path.stat().st_mode & 0o777 == 0o600
