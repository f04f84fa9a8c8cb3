"""gateway/semantic_cache/log.py: an append-only log per tenant and pool, tailed by cursor, trimmed."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import redis.asyncio

from gateway.semantic_cache.log import LogKeys, Record
from tests.gateway.semantic_cache.conftest import Logs


def record(entry_id: str) -> Record:
    return Record((0, 0), entry_id, np.ones(4, dtype=np.float32).tobytes(), "|lit")


async def test_read_since_tails_by_cursor_in_append_order(logs: Logs) -> None:
    writer, reader = logs.new(), logs.new()
    for name in ("a", "b", "c"):
        assert await writer.append(
            "acme", "small", record(name), b"body-" + name.encode(), ttl_s=60, max_entries=10
        )
    first = await reader.read_since("acme", "small", None, 2)
    assert [r.entry_id for r in first] == ["a", "b"]
    rest = await reader.read_since("acme", "small", first[-1].position, 10)
    assert [r.entry_id for r in rest] == ["c"] and rest[0].literals == "|lit"
    assert rest[0].vector == record("c").vector
    assert await reader.read_since("acme", "small", rest[-1].position, 10) == []
    assert await reader.get_body("acme", "small", "b") == b"body-b"
    assert await reader.read_since("globex", "small", None, 10) == []  # another tenant's log


async def test_appends_trim_the_oldest_beyond_max_entries_and_past_the_ttl(logs: Logs) -> None:
    log = logs.new()
    for name in ("a", "b", "c", "d"):
        await log.append("acme", "small", record(name), b"x", ttl_s=60, max_entries=2)
    kept = await log.read_since("acme", "small", None, 10)
    assert [r.entry_id for r in kept] == ["c", "d"]
    # the TTL trim is measured from the new record's id (the store's clock): wait until it has passed
    await asyncio.sleep(max(0.0, (kept[-1].created_ms + 60) / 1000 - time.time()))
    await log.append("acme", "small", record("e"), b"x", ttl_s=0.05, max_entries=2)
    assert [r.entry_id for r in await log.read_since("acme", "small", None, 10)] == ["e"]


async def test_redis_keys_carry_the_tenant_hash_tag(redis_flushed: str, logs: Logs) -> None:
    if logs.kind != "redis":
        return
    log = logs.new()
    await log.append("ac{me}", "small", record("a"), b"x", ttl_s=60, max_entries=10)
    client = redis.asyncio.Redis.from_url(redis_flushed)
    try:
        names = sorted(k.decode() if isinstance(k, bytes) else k for k in await client.keys("*"))
        ttl_ms = await client.pttl(LogKeys().log("ac{me}", "small"))
    finally:
        await client.aclose()
    assert names == ["sy:{t:ac%7Bme%7D}:sc:small:e:a", "sy:{t:ac%7Bme%7D}:sc:small:log"]
    assert 0 < ttl_ms <= 60_000
