"""The caches' policy: typed, frozen, validated with msgspec (the owner nests ``CacheConfig`` in the Policy).

::

    cache:
      response: {ttl_s: 300, max_entry_bytes: 1048576, scope: tenant}
      affinity: {chunk_bytes: 1024, ttl_s: 600, max_load_factor: 1.5}
      embeddings: {ttl_s: 86400}
      semantic: {enabled: true, pool: embed, threshold: 0.92}
      pools:
        creative: {cache_nondeterministic: true}
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
Scope = Literal["tenant", "global"]


class ResponseCacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The response cache of chat and text completions."""

    enabled: bool = True
    """Serve and store complete responses."""
    ttl_s: PositiveSeconds = 300.0
    """How long an entry lives after it was stored."""
    max_entry_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1_048_576
    """Responses larger than this (encoded entry) are not stored."""
    cache_nondeterministic: bool = False
    """Also cache requests that sample (temperature > 0 and no seed); off by default, since two calls
    of such a request are expected to differ."""
    hits_consume_tokens: bool = False
    """Whether a hit counts its tokens against tokens-per-minute (a hit always counts as a request)."""
    scope: Scope = "tenant"
    """``tenant``: entries are only ever served to the tenant that stored them; ``global``: shared by
    every tenant (only for pools whose prompts are not private)."""


class AffinityConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Prompt-prefix affinity: send a prompt to the replica that already holds its prefix in its KV cache."""

    enabled: bool = True
    """Prefer the replica holding the longest matching prefix."""
    chunk_bytes: Annotated[int, msgspec.Meta(ge=16)] = 1024
    """Size of one prefix chunk, in bytes of the canonical (UTF-8 JSON) prompt (about 4 bytes a token
    of English: 1024 bytes is ~256 tokens). Prompts shorter than one chunk have no affinity."""
    max_chunks: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    """Only the first this many chunks are hashed and looked up (bounds the one lookup's size)."""
    ttl_s: PositiveSeconds = 600.0
    """How long a prefix -> replica mapping lives after it was last recorded (about the engine's
    prefix-cache lifetime under load)."""
    max_load_factor: Annotated[float, msgspec.Meta(ge=1)] = 1.5
    """The preferred replica is overridden when its load exceeds the pool's average by this factor."""
    min_load_excess: Annotated[float, msgspec.Meta(ge=0)] = 4.0
    """...and by at least this many outstanding requests. An engine batches the requests it holds,
    so a few in flight are cheap, while a move costs a cold prefill and evicts someone else's
    prefix: measured on bench/affinity.py, an excess of 1 moved mappings on every burst and lost
    most of affinity's hits."""
    salt_requests: bool = True
    """Add a per-tenant ``cache_salt`` to requests, so an engine's prefix cache never crosses tenants."""
    salt_secret_env: str | None = "SORTYARD_CACHE_SALT_SECRET"
    """Environment variable holding the HMAC secret of the salts; it must be the same on every gateway
    replica (else the replicas' salts differ and the engines' prefix caches stop matching)."""


class EmbeddingCacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The per-input cache of ``/v1/embeddings``."""

    enabled: bool = True
    """Serve cached vectors and call the upstream only for the inputs it misses."""
    ttl_s: PositiveSeconds = 86400.0
    """How long a vector lives (an embedding model's output never changes)."""
    scope: Scope = "tenant"
    """``tenant``: vectors are cached per tenant; ``global``: shared (saves more, but tells a tenant,
    by timing, whether someone else embedded a string)."""


Similarity = Annotated[float, msgspec.Meta(gt=0, le=1)]


class SemanticCacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The semantic cache: a chat request close in meaning to one already answered (same tenant and
    pool) gets that answer (``gateway.semantic_cache``; docs/caching.md, Semantic cache)."""

    enabled: bool = False
    """Opt-in: every hit answers a question that was asked differently."""
    pool: str = "embed"
    """The pool that embeds the prompts (``/v1/embeddings``)."""
    model: str | None = None
    """The model name sent to that pool; None sends its replica's served model."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 2.0
    """The most the embedding call may take (a minute at most); past it the request goes on uncached."""
    threshold: Similarity = 0.92
    """The least cosine similarity of a hit (calibrated on bench/semantic_cache.py)."""
    thresholds: dict[str, Similarity] = msgspec.field(default_factory=dict)
    """Per-pool overrides of ``threshold``."""
    pools: tuple[str, ...] = ()
    """The chat pools it applies to; empty: every pool but the embedding pool."""
    ttl_s: Annotated[float, msgspec.Meta(gt=0, le=31_536_000)] = 3600.0
    """How long an entry lives after it was stored: a year at most (finite: it becomes a Redis
    expiry and the log's trim point)."""
    max_entries: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    """Entries kept per tenant and pool; the oldest go first."""
    allow_sampled: bool = False
    """Also answer requests that sample (temperature > 0 or top_p < 1)."""
    match_literals: bool = True
    """A hit also needs the same numbers, names and negations as the prompt (MiniLM embeds
    "5 km" and "50 km" almost identically)."""
    max_entry_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1_048_576
    """Responses larger than this are not stored."""

    def applies_to(self, pool: str) -> bool:
        return self.enabled and pool != self.pool and (not self.pools or pool in self.pools)

    def threshold_for(self, pool: str) -> float:
        return self.thresholds.get(pool, self.threshold)


class PoolCacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Per-pool overrides; ``None`` keeps the policy-wide value."""

    response: bool | None = None
    """Turn the response cache on or off for this pool."""
    cache_nondeterministic: bool | None = None
    """Opt this pool in (or out) of caching sampled requests."""
    ttl_s: PositiveSeconds | None = None
    """This pool's response-cache TTL."""
    affinity: bool | None = None
    """Turn prefix affinity on or off for this pool."""


class CacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """All the caches' settings."""

    response: ResponseCacheConfig = ResponseCacheConfig()
    affinity: AffinityConfig = AffinityConfig()
    embeddings: EmbeddingCacheConfig = EmbeddingCacheConfig()
    semantic: SemanticCacheConfig = SemanticCacheConfig()
    pools: dict[str, PoolCacheConfig] = msgspec.field(default_factory=dict)
    """Overrides by pool name."""

    def response_for(self, pool: str) -> ResponseCacheConfig:
        """The response-cache settings of ``pool``, its overrides applied."""
        override = self.pools.get(pool)
        if override is None:
            return self.response
        changes: dict[str, object] = {}
        if override.response is not None:
            changes["enabled"] = override.response
        if override.cache_nondeterministic is not None:
            changes["cache_nondeterministic"] = override.cache_nondeterministic
        if override.ttl_s is not None:
            changes["ttl_s"] = override.ttl_s
        return msgspec.structs.replace(self.response, **changes) if changes else self.response

    def affinity_enabled_for(self, pool: str) -> bool:
        override = self.pools.get(pool)
        if override is not None and override.affinity is not None:
            return override.affinity
        return self.affinity.enabled
