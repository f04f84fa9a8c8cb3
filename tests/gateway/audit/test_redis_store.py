"""The chain in a real Redis: appended in order, and two gateways writing at once never fork it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from gateway.audit.chain import decode_entry, verify
from gateway.audit.entry import Event
from gateway.audit.redis_store import RedisAuditStore
from gateway.audit.store import AuditStoreError


def _event(writer: str, i: int) -> Event:
    return Event(at=float(i), actor=writer, action="key.update", target=f"k{i}")


async def test_entries_are_appended_in_order_under_one_hash_tagged_key(redis_flushed: str) -> None:
    store = RedisAuditStore.from_url(redis_flushed)
    try:
        entries = [await store.append(_event("a", i)) for i in range(3)]
        lines = await store.lines()
        assert store.key == "sy:{audit}:chain"
        assert [decode_entry(line) for line in lines] == entries
        assert verify(lines).is_intact and entries[2].seq == 2
    finally:
        await store.close()


async def test_two_writers_interleaving_never_fork_the_chain(redis_flushed: str) -> None:
    a, b = RedisAuditStore.from_url(redis_flushed), RedisAuditStore.from_url(redis_flushed)
    try:
        written = await asyncio.gather(
            *(store.append(_event(name, i)) for i in range(15) for name, store in (("a", a), ("b", b)))
        )
        lines = await a.lines()
        verdict = verify(lines)
        assert verdict.is_intact and verdict.num_entries == 30
        assert sorted(e.seq for e in written) == list(range(30))  # each writer got its own place
        assert {decode_entry(line).actor for line in lines} == {"a", "b"}
    finally:
        await a.close()
        await b.close()


async def test_a_tampered_element_is_found_by_verify(redis_flushed: str) -> None:
    store = RedisAuditStore.from_url(redis_flushed)
    try:
        for i in range(3):
            await store.append(_event("a", i))
        first = msgspec.structs.replace(decode_entry((await store.lines())[1]), actor="mallory")
        await store.redis.resp.execute("LSET", store.key, 1, msgspec.json.encode(first))
        verdict = verify(await store.lines())
        assert verdict.bad_seq == 1 and "hash mismatch" in (verdict.reason or "")
    finally:
        await store.close()


async def test_a_garbled_tail_stops_appends_instead_of_starting_a_new_chain(redis_flushed: str) -> None:
    store = RedisAuditStore.from_url(redis_flushed)
    try:
        await store.append(_event("a", 0))
        await store.redis.resp.execute("RPUSH", store.key, b"{not json")
        with pytest.raises(AuditStoreError):
            await store.append(_event("a", 1))
    finally:
        await store.close()
