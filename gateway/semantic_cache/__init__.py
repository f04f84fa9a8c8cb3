"""The semantic cache: answers a chat prompt close in meaning to one already answered for the same
tenant and pool (docs/caching.md, Semantic cache).

Public API::

    from gateway.semantic_cache import (
        SemanticCache, Hit, SemanticLog, RedisSemanticLog, MemorySemanticLog, Record, LogKeys,
        VectorIndex, QueryEmbedder, SemanticCacheStage, canonical_text, literals, is_sampled,
    )

The policy's ``cache.semantic`` (``gateway.cache.config.SemanticCacheConfig``) turns it on.
"""

from gateway.semantic_cache.canonical import canonical_text, is_sampled, literals, system_prompt
from gateway.semantic_cache.embedder import QueryEmbedder
from gateway.semantic_cache.index import VectorIndex, normalised
from gateway.semantic_cache.log import LogKeys, MemorySemanticLog, Record, RedisSemanticLog, SemanticLog
from gateway.semantic_cache.semantic_cache import Hit, SemanticCache
from gateway.semantic_cache.stage import SEMANTIC_HIT, SIMILARITY_HEADER, SemanticCacheStage

__all__ = [
    "SEMANTIC_HIT",
    "SIMILARITY_HEADER",
    "Hit",
    "LogKeys",
    "MemorySemanticLog",
    "QueryEmbedder",
    "Record",
    "RedisSemanticLog",
    "SemanticCache",
    "SemanticCacheStage",
    "SemanticLog",
    "VectorIndex",
    "canonical_text",
    "is_sampled",
    "literals",
    "normalised",
    "system_prompt",
]
