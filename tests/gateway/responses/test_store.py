"""gateway/responses/store.py: stored responses per tenant, the same test body over the memory store and
a real Redis (its keys hash-tagged per tenant, with the policy's TTL)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.cache.blobs import MemoryBlobs, RedisBlobs
from gateway.responses.store import ResponseStore, StoredResponse, key_of

ITEMS = [
    {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
]
OUTPUT = [
    {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Yo"}],
    }
]
STORED = StoredResponse({"id": "resp_1", "object": "response", "output": OUTPUT}, ITEMS)


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ResponseStore]:
    if request.param == "memory":
        store = ResponseStore(MemoryBlobs(1024 * 1024))
    else:
        store = ResponseStore(RedisBlobs(request.getfixturevalue("redis_flushed"), timeout_s=2.0))
    yield store
    await store.close()


async def test_a_stored_response_comes_back_for_its_tenant_only(store: ResponseStore) -> None:
    assert await store.put("acme", STORED, ttl_s=60)
    found = await store.get("acme", "resp_1")
    assert found == STORED and found.id == "resp_1"
    assert found.conversation() == [*ITEMS, *OUTPUT]
    assert await store.get("globex", "resp_1") is None
    assert await store.get("acme", "resp_2") is None


async def test_delete_says_whether_there_was_one(store: ResponseStore) -> None:
    await store.put("acme", STORED, ttl_s=60)
    assert not await store.delete("globex", "resp_1")
    assert await store.delete("acme", "resp_1")
    assert await store.get("acme", "resp_1") is None
    assert not await store.delete("acme", "resp_1")


async def test_the_ttl_is_kept() -> None:
    now = [0.0]
    store = ResponseStore(MemoryBlobs(1024 * 1024, clock=lambda: now[0]))
    await store.put("acme", STORED, ttl_s=10)
    now[0] = 11.0
    assert await store.get("acme", "resp_1") is None


async def test_redis_keys_are_per_tenant_and_hash_tagged(redis_flushed: str) -> None:
    import redis

    store = ResponseStore(RedisBlobs(redis_flushed, timeout_s=2.0))
    await store.put("acme", STORED, ttl_s=60)
    await store.close()
    assert key_of("acme", "resp_1") == "sy:{t:acme}:resp:resp_1"
    client = redis.Redis.from_url(redis_flushed)
    assert client.keys("*") == [b"sy:{t:acme}:resp:resp_1"]
    assert 0 < client.ttl("sy:{t:acme}:resp:resp_1") <= 60
    client.close()


async def test_a_damaged_entry_reads_as_none() -> None:
    blobs = MemoryBlobs(1024)
    await blobs.set(key_of("acme", "resp_x"), b"not json", 60)
    assert await ResponseStore(blobs).get("acme", "resp_x") is None
