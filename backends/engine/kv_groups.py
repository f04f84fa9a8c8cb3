"""Two KV groups for a model that mixes full and sliding layers (Gemma 3), as vLLM's hybrid allocator
lays them out: the full layers' K/V in one pool whose blocks a sequence keeps, the sliding layers' K/V in
another whose blocks are freed once the window has passed them.

Each group is a ``BlockManager``: the full one with no window, the sliding one exactly the pool of a model
whose every layer slides (``sliding_window`` set). A sequence has a block table in each (its own
``block_table`` and ``sliding_blocks``); both advance together, so a position's slot differs by group
but ``num_computed_tokens`` is shared. ``KVGroups`` offers the scheduler and engine the same calls as one
``BlockManager``, each asked of both groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from backends.engine.block_manager import BlockManager
from backends.engine.config import EngineConfig
from backends.engine.layers import kv_quant
from backends.engine.model_config import ModelConfig
from backends.engine.sequence import Sequence


class KVBlocks(Protocol):
    """What the scheduler and the engine ask of the KV cache's blocks: one ``BlockManager`` or
    ``KVGroups``. Cache hits are opaque to callers: ``len(hits)`` blocks from the start."""

    block_size: int

    @property
    def num_blocks(self) -> int: ...
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def num_token_slots(self) -> int: ...
    @property
    def usage(self) -> float: ...
    @property
    def prefix_cache_queries(self) -> int: ...
    @property
    def prefix_cache_hits(self) -> int: ...

    def get_computed_blocks(self, seq: Sequence) -> list[Any]: ...
    def can_allocate(self, seq: Sequence, computed_blocks: list[Any], num_new_tokens: int) -> bool: ...
    def allocate(self, seq: Sequence, computed_blocks: list[Any], num_new_tokens: int) -> None: ...
    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool: ...
    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None: ...
    def can_ever_fit(self, seq: Sequence) -> bool: ...
    def max_new_tokens(self, seq: Sequence, num_computed_tokens: int) -> int: ...
    def cache_full_blocks(self, seq: Sequence) -> None: ...
    def free_out_of_window(self, seq: Sequence) -> int: ...
    def fork(self, parent: Sequence, child: Sequence) -> None: ...
    def free(self, seq: Sequence) -> None: ...
    def check_invariants(self, seqs: Iterable[Sequence] | None = None) -> None: ...


class KVGroups:
    """The full layers' pool (``full``) and the sliding layers' pool (``sliding``), asked together."""

    def __init__(self, full: BlockManager, sliding: BlockManager) -> None:
        assert full.sliding_window is None and sliding.sliding_window is not None
        assert sliding.is_sliding_group and full.block_size == sliding.block_size
        self.full = full
        self.sliding = sliding
        self.groups = (full, sliding)
        self.block_size = full.block_size

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.full.num_blocks + self.sliding.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.full.num_free_blocks + self.sliding.num_free_blocks

    @property
    def num_token_slots(self) -> int:
        """The full pool bounds a prompt; the sliding one holds only its window at a time."""
        return self.full.num_token_slots

    @property
    def usage(self) -> float:
        """The fuller group's share: the one that runs out first."""
        return max(self.full.usage, self.sliding.usage)

    @property
    def prefix_cache_queries(self) -> int:
        return self.full.prefix_cache_queries

    @property
    def prefix_cache_hits(self) -> int:
        return self.full.prefix_cache_hits

    # -- prefix cache --------------------------------------------------------------------------------
    def get_computed_blocks(self, seq: Sequence) -> list[tuple[int, int]]:
        """Cached (full, sliding) block pairs from the start: the full group must hold the whole prefix,
        the sliding group only the window before the resume point (``FREED_BLOCK`` before it)."""
        full_hits = self.full.get_computed_blocks(seq)
        sliding_hits = self.sliding.get_computed_blocks(seq, max_blocks=len(full_hits))
        return list(zip(full_hits, sliding_hits, strict=False))

    def cache_full_blocks(self, seq: Sequence) -> None:
        for g in self.groups:
            g.cache_full_blocks(seq)

    # -- allocate / free -----------------------------------------------------------------------------
    def can_ever_fit(self, seq: Sequence) -> bool:
        return all(g.can_ever_fit(seq) for g in self.groups)

    def max_new_tokens(self, seq: Sequence, num_computed_tokens: int) -> int:
        return min(g.max_new_tokens(seq, num_computed_tokens) for g in self.groups)

    def can_allocate(self, seq: Sequence, computed_blocks: list[Any], num_new_tokens: int) -> bool:
        full, sliding = _split(computed_blocks)
        return self.full.can_allocate(seq, full, num_new_tokens) and self.sliding.can_allocate(
            seq, sliding, num_new_tokens
        )

    def allocate(self, seq: Sequence, computed_blocks: list[Any], num_new_tokens: int) -> None:
        full, sliding = _split(computed_blocks)
        self.full.allocate(seq, full, num_new_tokens)
        self.sliding.allocate(seq, sliding, num_new_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        return all(g.can_append(seq, num_new_tokens) for g in self.groups)

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        for g in self.groups:
            g.append_slots(seq, num_new_tokens)

    def free_out_of_window(self, seq: Sequence) -> int:
        return self.sliding.free_out_of_window(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Both groups share the same number of prompt blocks (the sliding one may allow none, when the
        parent already freed part of the window the child starts from)."""
        num_shared = self.sliding.num_forkable(parent, child, self.full.num_forkable(parent, child))
        for g in self.groups:
            g.fork(parent, child, num_shared)

    def free(self, seq: Sequence) -> None:
        for g in self.groups:
            g.free(seq)

    def check_invariants(self, seqs: Iterable[Sequence] | None = None) -> None:
        live = None if seqs is None else list(seqs)
        for g in self.groups:
            g.check_invariants(live)
        if live is not None:
            for seq in live:
                assert len(seq.block_table) == len(seq.sliding_blocks.block_table), (
                    f"sequence {seq.seq_id}: its two groups' tables cover different lengths"
                )


def _split(computed_blocks: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    return [f for f, _ in computed_blocks], [s for _, s in computed_blocks]


@dataclass(frozen=True)
class KVPoolSizes:
    """Blocks in each pool: ``num_sliding_blocks`` is None for one pool (every layer in every block)."""

    num_blocks: int
    """The single pool's blocks, or the full layers' pool's with two groups."""
    num_sliding_blocks: int | None = None


def plan_kv_pools(
    cfg: ModelConfig,
    config: EngineConfig,
    budget_bytes: int,
    dtype_bytes: int,
    window: int | None,
    max_model_len: int,
) -> KVPoolSizes:
    """Split ``budget_bytes`` between the pools; one pool unless ``window`` (the sliding layers', None
    when nothing may be freed) frees the sliding layers of a model that also has full ones. An element
    takes ``dtype_bytes`` (the model dtype's), or one byte plus a scale a row when ``config.kv_cache_dtype``
    quantizes.

    Two groups start from the one-pool count (both pools as many blocks as one pool would have: a split
    proportional to each group's bytes per token), then the sliding pool is capped at what it can ever
    use: ``max_num_seqs`` windows (and a block each) plus one step's prefill chunk. The bytes above that
    cap go to the full pool, which keeps every block of every sequence and so is what limits admission.
    No pool gets more blocks than every sequence at full length could use (they would only waste memory).
    """
    bs = config.block_size
    # K and V rows of every kv head, each with its scale when ``config.kv_cache_dtype`` quantizes
    row = kv_quant.row_bytes(cfg.head_dim, dtype_bytes, config.kv_cache_dtype)
    layer_block_bytes = 2 * cfg.num_kv_heads * row * bs
    max_blocks = config.max_num_seqs * -(-max_model_len // bs) * 2
    num_one_pool = min(budget_bytes // (cfg.num_layers * layer_block_bytes), max_blocks)
    num_sliding_layers = sum(cfg.is_sliding(i) for i in range(cfg.num_layers))
    if num_one_pool < 1:
        block_bytes = cfg.num_layers * layer_block_bytes
        raise ValueError(f"KV budget of {budget_bytes} bytes holds no block of {block_bytes} bytes")
    if window is None or num_sliding_layers == cfg.num_layers:
        return KVPoolSizes(num_one_pool)
    window_blocks = -(-(window - 1) // bs) + 1
    # a block more a sequence covers the rounding of its prefill chunk's own blocks
    sliding_cap = config.max_num_seqs * (window_blocks + 1) + -(-config.max_num_batched_tokens // bs)
    num_sliding = min(num_one_pool, sliding_cap)
    left = budget_bytes - num_sliding * num_sliding_layers * layer_block_bytes
    num_full_layers = cfg.num_layers - num_sliding_layers
    num_full = min(left // (num_full_layers * layer_block_bytes), max_blocks)
    return KVPoolSizes(num_full, num_sliding)


def build_kv_blocks(
    sizes: KVPoolSizes,
    block_size: int,
    *,
    enable_prefix_caching: bool,
    window: int,
    single_pool_window: int | None,
) -> KVBlocks:
    """One pool (freeing what ``single_pool_window`` passed, when every layer slides), or the full and
    sliding layers' groups when ``sizes`` has a sliding pool (``window`` is the sliding layers')."""
    if sizes.num_sliding_blocks is None:
        return BlockManager(
            sizes.num_blocks,
            block_size,
            enable_prefix_caching=enable_prefix_caching,
            sliding_window=single_pool_window,
        )
    full = BlockManager(sizes.num_blocks, block_size, enable_prefix_caching=enable_prefix_caching)
    sliding = BlockManager(
        sizes.num_sliding_blocks,
        block_size,
        enable_prefix_caching=enable_prefix_caching,
        sliding_window=window,
        is_sliding_group=True,
    )
    return KVGroups(full, sliding)
