"""The response-cache contract: every test body runs over the memory twin and a real Redis."""

from __future__ import annotations

import asyncio
import signal

import redis.asyncio as aioredis

from gateway.cache import CacheKeys, Entry, EntryKind, MemoryResponseCache, RedisResponseCache, ResponseCache
from gateway.cache.entry import HEADER_BYTES
from tests.gateway.cache.conftest import Backend, Events
from tests.gateway.cache.samples import CHAT, encode
from tools.servers.redis_server import RedisServer

KEYS = CacheKeys()
BODY = {"model": "small", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0}
ENTRY = Entry(EntryKind.CHAT, encode(CHAT))


def cache_on(backend: Backend, **kwargs: object) -> ResponseCache:
    return ResponseCache(backend.blobs(), on_event=backend.events, **kwargs)  # type: ignore[arg-type]


async def raw_write(backend: Backend, cache: ResponseCache, key: str, data: bytes) -> None:
    """Write bytes behind the cache's back, as a bug or a bit flip would."""
    await cache.blobs.set(key, data, 60)


async def test_put_then_get(backend: Backend) -> None:
    cache = cache_on(backend)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    assert await cache.get(key) is None
    assert await cache.put(key, ENTRY, ttl_s=60)
    assert await cache.get(key) == ENTRY
    assert backend.events["miss"] == 1 and backend.events["hit"] == 1 and backend.events["store"] == 1
    assert backend.events["hit_bytes"] == backend.events["store_bytes"] == ENTRY.num_bytes
    await cache.delete(key)
    assert await cache.get(key) is None


async def test_entries_expire_after_their_ttl(backend: Backend) -> None:
    cache = cache_on(backend)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    await cache.put(key, ENTRY, ttl_s=60)
    await backend.advance(59)
    assert await cache.get(key) == ENTRY
    await backend.advance(1)
    assert await cache.get(key) is None


async def test_entries_over_the_size_limit_are_not_stored(backend: Backend) -> None:
    cache = cache_on(backend, max_entry_bytes=ENTRY.num_bytes - 1)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    assert not await cache.put(key, ENTRY, ttl_s=60)
    assert await cache.get(key) is None
    assert backend.events["oversize"] == 1 and backend.events["store"] == 0
    # the policy's limit, given per put, wins over the default
    assert await cache.put(key, ENTRY, ttl_s=60, max_entry_bytes=ENTRY.num_bytes)
    assert await cache.get(key) == ENTRY


async def test_a_truncated_entry_is_a_miss_and_is_deleted(backend: Backend) -> None:
    cache = cache_on(backend)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    await raw_write(backend, cache, key, ENTRY.encode()[:-10])
    assert await cache.get(key) is None
    assert backend.events["corrupt"] == 1 and backend.events["miss"] == 1 and backend.events["hit"] == 0
    assert await cache.blobs.get(key) is None  # deleted, not left to fail again


async def test_a_corrupt_entry_is_a_miss_and_is_deleted(backend: Backend) -> None:
    cache = cache_on(backend)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    data = bytearray(ENTRY.encode())
    data[HEADER_BYTES + 20] ^= 0xFF
    await raw_write(backend, cache, key, bytes(data))
    assert await cache.get(key) is None
    await raw_write(backend, cache, key, b"not an entry at all")
    assert await cache.get(key) is None
    assert backend.events["corrupt"] == 2
    assert await cache.blobs.get(key) is None


async def test_tenant_b_never_receives_tenant_as_entry(backend: Backend) -> None:
    cache = cache_on(backend)
    await cache.put(KEYS.response_for("tenant-a", "small", "chat", BODY), ENTRY, ttl_s=60)
    assert await cache.get(KEYS.response_for("tenant-b", "small", "chat", BODY)) is None
    assert await cache.get(KEYS.response_for("tenant-a", "small", "chat", BODY)) == ENTRY
    # same tenant, another pool: also separate
    assert await cache.get(KEYS.response_for("tenant-a", "large", "chat", BODY)) is None


async def test_memory_cache_evicts_least_recently_used_by_bytes() -> None:
    events = Events()
    keys = [KEYS.response("acme", "small", f"{i:032x}") for i in range(4)]
    size = len(ENTRY.encode()) + len(keys[0]) + 64  # room for exactly three entries
    cache = MemoryResponseCache(max_bytes=3 * size, on_event=events)
    for key in keys[:3]:
        assert await cache.put(key, ENTRY, ttl_s=60)
    assert await cache.get(keys[0]) == ENTRY  # keys[0] is now the most recently used
    await cache.put(keys[3], ENTRY, ttl_s=60)
    assert events["evict"] == 1
    assert await cache.get(keys[1]) is None
    assert [await cache.get(k) == ENTRY for k in (keys[0], keys[2], keys[3])] == [True] * 3


async def test_redis_down_is_a_miss_never_an_error(own_redis: RedisServer) -> None:
    events = Events()
    cache = RedisResponseCache(own_redis.url, timeout_s=0.2, on_event=events, retry_interval_s=0.05)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    assert await cache.put(key, ENTRY, ttl_s=60)
    own_redis.stop()
    assert await cache.get(key) is None
    assert not await cache.put(key, ENTRY, ttl_s=60)
    assert events["error"] >= 2
    own_redis.start()
    client = aioredis.Redis.from_url(own_redis.url)
    await client.set(key, ENTRY.encode())
    await client.aclose()
    for _ in range(500):  # the circuit closes after retry_interval_s
        if await cache.get(key) == ENTRY:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the cache did not recover after Redis came back")
    await cache.close()


async def test_a_hung_redis_costs_at_most_the_timeout_and_answers_right_after(own_redis: RedisServer) -> None:
    events = Events()
    cache = RedisResponseCache(own_redis.url, timeout_s=0.1, on_event=events, retry_interval_s=0.05)
    key = KEYS.response_for("acme", "small", "chat", BODY)
    other = KEYS.response_for("acme", "small", "chat", {**BODY, "temperature": 1})
    assert own_redis.proc is not None
    try:
        assert await cache.put(key, ENTRY, ttl_s=60)
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            # a frozen Redis never answers: these return only because the timeout and the circuit cut
            # them (the outer bound fails the test fast if they did not)
            async with asyncio.timeout(10):
                assert await cache.get(key) is None  # a miss, never an error
                assert not await cache.put(other, ENTRY, ttl_s=60)  # the circuit is open: no wait at all
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        assert events["error"] == 2
        for _ in range(500):  # late replies to the timed-out call are consumed, not handed to later calls
            if await cache.get(key) == ENTRY:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the cache did not answer after Redis resumed")
    finally:
        await cache.close()
