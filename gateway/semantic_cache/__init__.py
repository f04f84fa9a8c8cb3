"""The semantic cache: answers a chat prompt close in meaning to one already answered for the same
tenant and pool (docs/caching.md, Semantic cache).

Public API::

    from gateway.semantic_cache import (
        SemanticCache, Hit, SemanticLog, RedisSemanticLog, MemorySemanticLog, Record, LogKeys,
        VectorIndex, QueryEmbedder, canonical_text, scope, literals, literals_match, is_sampled,
    )

Its pipeline stage is ``gateway.stages.semantic_cache.SemanticCacheStage``. The policy's
``cache.semantic`` (``gateway.cache.config.SemanticCacheConfig``) turns it on.
"""

from gateway.semantic_cache.canonical import canonical_text, is_sampled, literals, literals_match, scope
from gateway.semantic_cache.embedder import QueryEmbedder
from gateway.semantic_cache.index import VectorIndex, normalised
from gateway.semantic_cache.log import LogKeys, MemorySemanticLog, Record, RedisSemanticLog, SemanticLog
from gateway.semantic_cache.semantic_cache import Hit, SemanticCache

__all__ = [
    "Hit",
    "LogKeys",
    "MemorySemanticLog",
    "QueryEmbedder",
    "Record",
    "RedisSemanticLog",
    "SemanticCache",
    "SemanticLog",
    "VectorIndex",
    "canonical_text",
    "is_sampled",
    "literals",
    "literals_match",
    "normalised",
    "scope",
]
