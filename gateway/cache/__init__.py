"""Response cache, single flight, prompt-prefix affinity and embedding cache, in Redis or in memory.

Public API::

    from gateway.cache import (
        CacheConfig, ResponseCacheConfig, AffinityConfig, EmbeddingCacheConfig, PoolCacheConfig,
        CacheKeys, request_hash, is_cacheable, read_directives, Directives, CACHE_HEADER,
        Entry, EntryKind, CorruptEntry, replay_sse, StreamAccumulator,
        ResponseCache, RedisResponseCache, MemoryResponseCache,
        SingleFlight, Flight,
        prefix_chain, choose_replica, cache_salt, AffinityMap, RedisAffinityMap, MemoryAffinityMap,
        EmbeddingCache, RedisEmbeddingCache, MemoryEmbeddingCache, embedding_inputs, embedding_options,
    )

See the README (Caches) for how the pieces fit into the pipeline.
"""

from gateway.cache.affinity import EVENT_OF_REASON, cache_salt, choose_replica, prefix_chain, prompt_bytes
from gateway.cache.affinity_map import AffinityMap, BlobAffinityMap, MemoryAffinityMap, RedisAffinityMap
from gateway.cache.blobs import Blobs, MemoryBlobs, RedisBlobs
from gateway.cache.cache_keys import (
    CacheKeys,
    canonical_request,
    embedding_options,
    is_cacheable,
    request_hash,
)
from gateway.cache.config import (
    AffinityConfig,
    CacheConfig,
    EmbeddingCacheConfig,
    PoolCacheConfig,
    ResponseCacheConfig,
)
from gateway.cache.directives import BYPASS, CACHE_HEADER, HIT, MISS, Directives, read_directives
from gateway.cache.embedding_cache import (
    EmbeddingCache,
    MemoryEmbeddingCache,
    RedisEmbeddingCache,
    embedding_inputs,
)
from gateway.cache.entry import CorruptEntry, Entry, EntryKind
from gateway.cache.redis_guard import EventHook, RedisGuard
from gateway.cache.replay import StreamAccumulator, replay_sse
from gateway.cache.response_cache import MemoryResponseCache, RedisResponseCache, ResponseCache
from gateway.cache.single_flight import Flight, SingleFlight

__all__ = [
    "BYPASS",
    "CACHE_HEADER",
    "EVENT_OF_REASON",
    "HIT",
    "MISS",
    "AffinityConfig",
    "AffinityMap",
    "BlobAffinityMap",
    "Blobs",
    "CacheConfig",
    "CacheKeys",
    "CorruptEntry",
    "Directives",
    "EmbeddingCache",
    "EmbeddingCacheConfig",
    "Entry",
    "EntryKind",
    "EventHook",
    "Flight",
    "MemoryAffinityMap",
    "MemoryBlobs",
    "MemoryEmbeddingCache",
    "MemoryResponseCache",
    "PoolCacheConfig",
    "RedisAffinityMap",
    "RedisBlobs",
    "RedisEmbeddingCache",
    "RedisGuard",
    "RedisResponseCache",
    "ResponseCache",
    "ResponseCacheConfig",
    "SingleFlight",
    "StreamAccumulator",
    "cache_salt",
    "canonical_request",
    "choose_replica",
    "embedding_inputs",
    "embedding_options",
    "is_cacheable",
    "prefix_chain",
    "prompt_bytes",
    "read_directives",
    "replay_sse",
    "request_hash",
]
