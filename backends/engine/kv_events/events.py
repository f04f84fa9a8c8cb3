"""KV-cache events on vLLM's wire: what a router reads to learn which replica holds which prefix blocks.

The shapes are vLLM's (``vllm/distributed/kv_events.py``), so a subscriber written for vLLM (llm-d's
precise prefix-cache scorer, our gateway) reads this engine unchanged: msgspec Structs encoded as
MessagePack maps, events tagged by class name under the key ``"type"``, fields at their default left
out. A batch holds one engine step's events.

Block hashes are our prefix cache's BLAKE2b digests folded to 64 bits the way vLLM folds its own
(``int.from_bytes(digest, "big") & (2**64 - 1)``, i.e. the digest's last 8 bytes), so they are stable
across processes and restarts and fit a uint64 on the wire.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from backends.engine.block_hash import BlockHash

MEDIUM_GPU = "GPU"
"""vLLM's name for the engine's own KV pool (ours too when it lives in host memory: the tier a router
scores as "on the replica", as opposed to an offloaded CPU or disk copy)."""
FULL_ATTENTION = "full_attention"
SLIDING_WINDOW = "sliding_window"
"""``kv_cache_spec_kind`` values, vLLM's names for what the blocks of a KV group hold."""

_UINT64_MASK = (1 << 64) - 1


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """An event of the prefix cache; the tag (``"type"``) is the class name, as vLLM's."""


class BlockStored(KVCacheEvent):
    """A run of full blocks became findable by hash: consecutive blocks of one sequence, the first
    chained from ``parent_block_hash`` (None: the sequence's first block)."""

    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    """The run's tokens, ``block_size`` a block, in order."""
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    """The KV group (0: the full layers, 1: the sliding layers of a model that has both)."""
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    """Blocks evicted from the prefix cache: their hashes no longer hit."""

    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    """The whole prefix cache was dropped."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared
"""Any event a batch carries."""


class KVEventBatch(msgspec.Struct, omit_defaults=True, gc=False):
    """One engine step's events, in the order they happened."""

    ts: float
    """Wall-clock seconds (``time.time()``) when the step's batch was made."""
    events: list[KVEvent]
    data_parallel_rank: int | None = None


class KVEventSink(Protocol):
    """Where a block manager records its events (the publisher, or a list in tests)."""

    def record(self, event: KVEvent) -> None: ...


def external_block_hash(block_hash: BlockHash) -> int:
    """The wire form of one of our block keys: its digest folded to an unsigned 64-bit int."""
    return int.from_bytes(block_hash.digest, "big") & _UINT64_MASK


def block_stored(
    run: list[BlockHash],
    parent: BlockHash | None,
    block_size: int,
    *,
    group_idx: int,
    sliding_window: int | None,
) -> BlockStored:
    """The event for ``run`` (consecutive full blocks) newly cached after ``parent``. A sequence's first
    block carries its cache salt in ``extra_keys`` (``("salt",)``), as vLLM's does: the salt went into
    the block's hash, and a router that names blocks by their tokens needs it to tell tenants apart."""
    salt = run[0].cache_salt if parent is None else None
    return BlockStored(
        block_hashes=[external_block_hash(h) for h in run],
        parent_block_hash=None if parent is None else external_block_hash(parent),
        token_ids=[t for h in run for t in h.token_ids],
        block_size=block_size,
        lora_id=None,
        medium=MEDIUM_GPU,
        lora_name=None,
        extra_keys=None if salt is None else [(salt,)] + [None] * (len(run) - 1),
        group_idx=group_idx,
        kv_cache_spec_kind=FULL_ATTENTION if sliding_window is None else SLIDING_WINDOW,
        kv_cache_spec_sliding_window=sliding_window,
    )


def block_removed(block_hash: BlockHash, *, group_idx: int) -> BlockRemoved:
    """The event for one evicted block."""
    return BlockRemoved(
        block_hashes=[external_block_hash(block_hash)], medium=MEDIUM_GPU, group_idx=group_idx
    )


def encode_batch(batch: KVEventBatch) -> bytes:
    """The batch's MessagePack payload (the third frame of a published message)."""
    return msgspec.msgpack.encode(batch)


def decode_batch(payload: bytes) -> KVEventBatch:
    """A payload back into a batch (subscribers and tests); raises ``msgspec.DecodeError`` on junk."""
    return msgspec.msgpack.decode(payload, type=KVEventBatch)
