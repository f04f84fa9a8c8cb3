"""The paged KV block pool: allocation, reference counts and the prefix cache.

Every full, computed block is keyed by a ``BlockHash``: a BLAKE2b digest chained from its parent block's
digest (and the request's cache salt) plus the block's exact token ids and salt. The lookup dict compares
whole keys, so two sequences share a block only when its tokens and salt are equal and everything before
it digests the same; a hash collision alone never serves another prompt's (or tenant's) KV.
A freed block that holds a hash stays findable in an O(1) LRU until a fresh allocation evicts it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from backends.engine.block_hash import BlockHash
from backends.engine.sequence import Sequence


class BlockManager:
    """Owns ``num_blocks`` KV blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        self.hash_to_block: dict[BlockHash, int] = {}  # keys compared whole on a hit: tokens and salt too
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()  # free blocks holding a hash, LRU first
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids) + len(self.evictable)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks if self.num_blocks else 0.0

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix cache --------------------------------------------------------------------------------
    def get_computed_blocks(self, seq: Sequence) -> list[int]:
        """The longest run of leading blocks already cached for seq (not yet referenced).

        At least one token is always left to compute, so the last prompt token yields logits.
        """
        if not self.enable_prefix_caching:
            return []
        max_blocks = (seq.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for h in seq.full_block_hashes(self.block_size)[:max_blocks]:
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register seq's newly full and computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        if num_full <= seq.num_hashed_blocks:
            return
        hashes = seq.full_block_hashes(self.block_size)
        for i in range(seq.num_hashed_blocks, num_full):
            block_id, h = seq.block_table[i], hashes[i]
            if self.block_hash[block_id] is None and h not in self.hash_to_block:
                self.block_hash[block_id] = h
                self.hash_to_block[h] = block_id
        seq.num_hashed_blocks = num_full

    # -- allocate / free -----------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, computed_blocks: list[int], num_new_tokens: int) -> bool:
        """Whether seq can start with its cache hits plus ``num_new_tokens`` computed this step."""
        num_needed = self.num_blocks_for(len(computed_blocks) * self.block_size + num_new_tokens)
        num_reused_free = sum(1 for b in computed_blocks if self.ref_counts[b] == 0)
        return num_needed - len(computed_blocks) <= self.num_free_blocks - num_reused_free

    def allocate(self, seq: Sequence, computed_blocks: list[int], num_new_tokens: int) -> None:
        """Give a waiting seq its cached blocks plus fresh ones for ``num_new_tokens``."""
        assert not seq.block_table, "allocate() on a sequence that already holds blocks"
        for block_id in computed_blocks:
            self._ref(block_id)
        seq.block_table = list(computed_blocks)
        seq.num_hashed_blocks = len(computed_blocks)
        seq.num_computed_tokens = len(computed_blocks) * self.block_size
        if seq.num_output_tokens == 0 and seq.num_preemptions == 0:
            seq.num_cached_tokens = seq.num_computed_tokens
        if self.enable_prefix_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += seq.num_computed_tokens
        self.append_slots(seq, num_new_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        return needed <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow seq's block table to hold ``num_new_tokens`` more computed tokens."""
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        for _ in range(needed):
            seq.block_table.append(self._take_fresh())

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let child share parent's full prompt blocks (copy-free); it computes only the tail."""
        num_shared = min((parent.num_prompt_tokens - 1) // self.block_size, len(parent.block_table))
        num_shared = min(num_shared, parent.num_computed_tokens // self.block_size)
        child.block_table = parent.block_table[:num_shared]
        for block_id in child.block_table:
            self._ref(block_id)
        child.num_computed_tokens = num_shared * self.block_size
        child.num_cached_tokens = parent.num_cached_tokens
        child.num_hashed_blocks = min(num_shared, parent.num_hashed_blocks)

    def free(self, seq: Sequence) -> None:
        """Drop seq's references; blocks that hold a hash stay reusable until evicted."""
        # Tail blocks first, so the LRU evicts the end of a prefix before its start.
        for block_id in reversed(seq.block_table):
            self.ref_counts[block_id] -= 1
            assert self.ref_counts[block_id] >= 0, f"block {block_id} freed twice"
            if self.ref_counts[block_id] == 0:
                if self.block_hash[block_id] is not None:
                    self.evictable[block_id] = None
                else:
                    self.free_ids.append(block_id)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_hashed_blocks = 0

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (blocks in use keep their data)."""
        for block_id in list(self.evictable):
            self.free_ids.append(block_id)
        self.evictable.clear()
        self.hash_to_block.clear()
        self.block_hash = [None] * self.num_blocks

    def _ref(self, block_id: int) -> None:
        if self.ref_counts[block_id] == 0:
            del self.evictable[block_id]  # cache hit on a freed block: revive it
        self.ref_counts[block_id] += 1

    def _take_fresh(self) -> int:
        if self.free_ids:
            block_id = self.free_ids.popleft()
        else:
            block_id, _ = self.evictable.popitem(last=False)  # evict the least recently freed
            h = self.block_hash[block_id]
            if h is not None:
                del self.hash_to_block[h]
                self.block_hash[block_id] = None
        assert self.ref_counts[block_id] == 0
        self.ref_counts[block_id] = 1
        return block_id

    # -- checks --------------------------------------------------------------------------------------
    def check_invariants(self, seqs: Iterable[Sequence] | None = None) -> None:
        """Assert the pool is consistent: no leaked, double-freed or dangling block.

        With ``seqs`` (every live sequence), reference counts must equal block-table occurrences.
        """
        free = list(self.free_ids)
        assert len(free) == len(set(free)), "a block is twice in the free list"
        free_set, lru_set = set(free), set(self.evictable)
        assert not free_set & lru_set, "a block is both free and evictable"
        for block_id in range(self.num_blocks):
            rc = self.ref_counts[block_id]
            assert rc >= 0, f"block {block_id} has refcount {rc}"
            is_idle = block_id in free_set or block_id in lru_set
            assert is_idle == (rc == 0), f"block {block_id}: refcount {rc}, idle={is_idle}"
            if block_id in free_set:
                assert self.block_hash[block_id] is None, f"free block {block_id} still holds a hash"
            if block_id in lru_set:
                assert self.block_hash[block_id] is not None, f"evictable block {block_id} has no hash"
        for h, block_id in self.hash_to_block.items():
            assert self.block_hash[block_id] == h, f"hash map points to block {block_id} with another hash"
        assert sum(h is not None for h in self.block_hash) == len(self.hash_to_block)
        if seqs is not None:
            counts = [0] * self.num_blocks
            for seq in seqs:
                for block_id in seq.block_table:
                    counts[block_id] += 1
            assert counts == self.ref_counts, "reference counts differ from the live block tables"
