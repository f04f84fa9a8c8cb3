"""The embedding cache contract over the memory twin and a real Redis."""

from __future__ import annotations

from gateway.cache import CacheKeys, EmbeddingCache, Entry, EntryKind
from tests.gateway.cache.conftest import Backend

KEYS = CacheKeys()
VECTORS = {"alpha": b"[0.1,0.2,0.3]", "beta": b"[0.4,0.5,0.6]", "gamma": b'"AAAAPwAAgD8="'}


async def test_batch_get_reports_hits_and_misses_in_order(backend: Backend) -> None:
    cache = EmbeddingCache(backend.blobs(), on_event=backend.events)
    keys = KEYS.embeddings("acme", "mini", ["alpha", "beta", "gamma"])
    assert await cache.get_many(keys) == [None, None, None]
    assert await cache.put_many([(keys[0], VECTORS["alpha"]), (keys[2], VECTORS["gamma"])], ttl_s=60)
    assert await cache.get_many(keys) == [VECTORS["alpha"], None, VECTORS["gamma"]]
    assert backend.events["hit"] == 2 and backend.events["miss"] == 4 and backend.events["store"] == 2
    assert await cache.get_many([]) == []


async def test_vectors_are_per_tenant_and_model(backend: Backend) -> None:
    cache = EmbeddingCache(backend.blobs())
    [key] = KEYS.embeddings("acme", "mini", ["alpha"])
    await cache.put_many([(key, VECTORS["alpha"])], ttl_s=60)
    assert await cache.get_many(KEYS.embeddings("globex", "mini", ["alpha"])) == [None]
    assert await cache.get_many(KEYS.embeddings("acme", "large", ["alpha"])) == [None]
    assert await cache.get_many(KEYS.embeddings("acme", "mini", ["alpha"])) == [VECTORS["alpha"]]


async def test_vectors_expire(backend: Backend) -> None:
    cache = EmbeddingCache(backend.blobs())
    keys = KEYS.embeddings("acme", "mini", ["alpha"])
    await cache.put_many([(keys[0], VECTORS["alpha"])], ttl_s=60)
    await backend.advance(59)
    assert await cache.get_many(keys) == [VECTORS["alpha"]]
    await backend.advance(1)
    assert await cache.get_many(keys) == [None]


async def test_corrupt_vectors_are_misses_and_deleted(backend: Backend) -> None:
    blobs = backend.blobs()
    cache = EmbeddingCache(blobs, on_event=backend.events)
    keys = KEYS.embeddings("acme", "mini", ["alpha", "beta", "gamma"])
    await cache.put_many([(keys[0], VECTORS["alpha"])], ttl_s=60)
    await blobs.set(keys[1], Entry(EntryKind.EMBEDDING, VECTORS["beta"]).encode()[:-2], 60)  # truncated
    await blobs.set(keys[2], Entry(EntryKind.CHAT, b"{}").encode(), 60)  # another kind of entry
    assert await cache.get_many(keys) == [VECTORS["alpha"], None, None]
    assert backend.events["corrupt"] == 2
    assert await blobs.get_many(keys[1:]) == [None, None]


def test_embedding_inputs_splits_every_input_form() -> None:
    from gateway.cache import embedding_inputs

    assert embedding_inputs("one") == ["one"]
    assert embedding_inputs(["a", "b"]) == ["a", "b"]
    assert embedding_inputs([1, 2, 3]) == [[1, 2, 3]]  # one tokenised input
    assert embedding_inputs([[1, 2], [3]]) == [[1, 2], [3]]
