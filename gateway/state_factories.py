"""Factories of what gateway replicas share: the limits store, the caches (and the Responses API's stored
responses) and the keys made at run time,
built from the policy in Redis when its Redis URL is set, else in this process (the single-replica
embedded default)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gateway.cache import (
    AffinityMap,
    MemoryAffinityMap,
    MemoryResponseCache,
    RedisAffinityMap,
    RedisResponseCache,
    ResponseCache,
    SingleFlight,
)
from gateway.cache.blobs import Blobs, MemoryBlobs, RedisBlobs
from gateway.cache.embedding_cache import EmbeddingCache, MemoryEmbeddingCache, RedisEmbeddingCache
from gateway.keys.redis_store import RedisKeyStore
from gateway.keys.store import FileKeyStore, KeyStore
from gateway.policy import Policy
from gateway.responses import ResponseStore
from gateway.semantic_cache import MemorySemanticLog, RedisSemanticLog, SemanticCache, SemanticLog
from gateway.settings import Settings
from gateway.stores import CreditStore, FailoverStore, MemoryStore, RedisStore, Store
from gateway.telemetry.metrics import Metrics


def build_store(policy: Policy, *, on_fallback: Callable[[str], None] | None = None) -> Store:
    """The policy's store: Redis (with a local fallback or fail-closed) when a URL is set, else memory."""
    config = policy.store
    url = os.environ.get(config.url_env) if config.url_env else None
    if not url:
        return MemoryStore()
    redis = RedisStore(url, timeout_s=config.timeout_s)
    primary: Store = (
        CreditStore(redis, flush_interval_s=config.flush_interval_s) if config.local_credit else redis
    )
    return FailoverStore(
        primary,
        MemoryStore(),
        mode=config.on_failure,
        on_fallback=on_fallback,
    )


def build_key_store(policy: Policy, settings: Settings) -> KeyStore:
    """Where keys made at run time live: the store's Redis when its URL is set (every replica sees
    them), else ``settings.keys_file`` (this host), else memory."""
    url = os.environ.get(policy.store.url_env) if policy.store.url_env else None
    if url:
        return RedisKeyStore.from_url(url, timeout_s=max(policy.store.timeout_s, 1.0))
    return FileKeyStore(settings.keys_file)


@dataclass(frozen=True)
class Caches:
    """The caches and the shared maps, in Redis or in this process."""

    responses: ResponseCache
    flights: SingleFlight
    affinity: AffinityMap
    embeddings: EmbeddingCache
    sticky: Blobs
    """Conversation -> pool, for sticky tier routing."""
    stored_responses: ResponseStore
    """The Responses API's stored responses (``store``, ``previous_response_id``)."""
    semantic: SemanticCache
    """Answered prompts by meaning (``cache.semantic``, off unless the policy turns it on)."""

    async def close(self) -> None:
        for closable in (
            self.responses,
            self.affinity,
            self.embeddings,
            self.sticky,
            self.stored_responses,
            self.semantic,
        ):
            await closable.close()


def build_caches(policy: Policy, metrics: Metrics) -> Caches:
    """Redis-backed caches when the store's Redis URL is set (shared by all replicas), else memory."""
    url = os.environ.get(policy.store.url_env) if policy.store.url_env else None
    responses: ResponseCache
    affinity: AffinityMap
    embeddings: EmbeddingCache
    sticky: Blobs
    stored: Blobs
    semantic: SemanticLog
    if url:
        timeout_s = policy.store.cache_timeout_s
        responses = RedisResponseCache(url, timeout_s=timeout_s, on_event=metrics.cache_hook("response"))
        affinity = RedisAffinityMap(url, timeout_s=timeout_s, on_event=metrics.cache_hook("affinity"))
        embeddings = RedisEmbeddingCache(url, timeout_s=timeout_s, on_event=metrics.cache_hook("embedding"))
        sticky = RedisBlobs(
            url, timeout_s=timeout_s, on_event=metrics.cache_hook("sticky"), name="sticky tiers"
        )
        # a miss here is a 404 to the client, not a cache miss: a longer wait before giving up
        stored = RedisBlobs(url, timeout_s=max(policy.store.timeout_s, 0.5), name="stored responses")
        semantic = RedisSemanticLog(
            RedisBlobs(
                url, timeout_s=timeout_s, on_event=metrics.cache_hook("semantic"), name="semantic cache"
            )
        )
    else:
        responses = MemoryResponseCache(on_event=metrics.cache_hook("response"))
        affinity = MemoryAffinityMap(on_event=metrics.cache_hook("affinity"))
        embeddings = MemoryEmbeddingCache(on_event=metrics.cache_hook("embedding"))
        sticky = MemoryBlobs(4 * 1024 * 1024)
        stored = MemoryBlobs(policy.responses.max_memory_bytes)
        semantic = MemorySemanticLog()
    flights = SingleFlight(responses, on_event=metrics.cache_hook("response"))
    semantic_cache = SemanticCache(semantic, on_event=metrics.cache_hook("semantic"))
    return Caches(responses, flights, affinity, embeddings, sticky, ResponseStore(stored), semantic_cache)
