"""Two KV groups for a model that mixes full and sliding layers (Gemma 3), as vLLM's hybrid allocator
lays them out: the full layers' K/V in one pool whose blocks a sequence keeps, the sliding layers' K/V in
another whose blocks are freed once the window has passed them.

Each group is a ``BlockManager``: the full one with no window, the sliding one exactly the pool of a model
whose every layer slides (``sliding_window`` set). A sequence has a block table in each (its own
``block_table`` and ``sliding_blocks``); both advance together, so a position's slot differs by group
but ``num_computed_tokens`` is shared. ``KVGroups`` offers the scheduler and engine the same calls as one
``BlockManager``, each asked of both groups. How many blocks each pool gets is ``kv_sizing.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from backends.engine.block_manager import BlockManager
from backends.engine.kv_sizing import KVPoolSizes
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
