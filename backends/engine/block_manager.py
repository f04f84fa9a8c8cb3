"""The paged KV block pool: allocation, reference counts and the prefix cache.

Every full, computed block is keyed by a ``BlockHash``: a BLAKE2b digest chained from its parent block's
digest (and the request's cache salt) plus the block's exact token ids and salt. The lookup dict compares
whole keys, so two sequences share a block only when its tokens and salt are equal and everything before
it digests the same; a hash collision alone never serves another prompt's (or tenant's) KV.
A freed block that holds a hash stays findable in an O(1) LRU until a fresh allocation evicts it.

When every layer slides, a sequence's leading blocks die once the window has passed them:
``free_out_of_window`` hands them back (a hashed one to the LRU, where it can still be hit) and leaves
``FREED_BLOCK`` in their table entries, so the table stays indexed by position while only the blocks
the window still reads count against the pool. A model that mixes sliding and full layers gets two
of these (``kv_groups.py``): this very freeing, in a pool holding only the sliding layers' K/V.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Protocol

from backends.engine.block_hash import BlockHash
from backends.engine.kv_events.events import AllBlocksCleared, KVEventSink, block_removed, block_stored
from backends.engine.sequence import FREED_BLOCK, Sequence


class BlockTable(Protocol):
    """One KV group's blocks of a sequence: the ``Sequence`` itself for the first group,
    ``Sequence.sliding_blocks`` for the sliding layers' group."""

    block_table: list[int]
    num_freed_blocks: int
    num_hashed_blocks: int


class BlockManager:
    """Owns ``num_blocks`` KV blocks of ``block_size`` token slots each.

    ``sliding_window``: the window every layer applies, given when the blocks it has passed may be
    freed; None keeps every block a sequence filled (full attention, some full layers, or freeing off).
    ``is_sliding_group``: this pool holds only the sliding layers of a model that also has full ones, so
    its table of a sequence is ``seq.sliding_blocks`` (the full layers' pool uses the sequence's own).
    ``event_sink``: told each block that becomes cached or is evicted, and each reset, as KV group
    ``group_idx`` (``kv_events/``); None records nothing.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool = True,
        sliding_window: int | None = None,
        is_sliding_group: bool = False,
        event_sink: KVEventSink | None = None,
        group_idx: int = 0,
    ) -> None:
        self.num_blocks = num_blocks
        self.is_sliding_group = is_sliding_group
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.sliding_window = sliding_window
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        self.hash_to_block: dict[BlockHash, int] = {}  # keys compared whole on a hit: tokens and salt too
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()  # free blocks holding a hash, LRU first
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.max_num_used_blocks = 0
        """High-water mark of blocks referenced at once (what a pool for this load must hold)."""
        self.event_sink = event_sink
        self.group_idx = group_idx

    def attach_event_sink(self, sink: KVEventSink, *, group_idx: int = 0) -> None:
        """Record this pool's prefix-cache events into ``sink`` from now on, as KV group ``group_idx``."""
        self.event_sink, self.group_idx = sink, group_idx

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids) + len(self.evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks if self.num_blocks else 0.0

    @property
    def num_token_slots(self) -> int:
        """Tokens the whole pool holds at once (a prompt must fit)."""
        return self.num_blocks * self.block_size

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def table(self, seq: Sequence) -> BlockTable:
        """seq's blocks in this pool."""
        return seq.sliding_blocks if self.is_sliding_group else seq

    # -- prefix cache --------------------------------------------------------------------------------
    def get_computed_blocks(self, seq: Sequence, max_blocks: int | None = None) -> list[int]:
        """The longest run of leading blocks already cached for seq (not yet referenced), at most
        ``max_blocks`` (what another KV group found).

        At least one token is always left to compute, so the last prompt token yields logits.
        """
        if not self.enable_prefix_caching:
            return []
        num_full = (seq.num_tokens - 1) // self.block_size
        max_blocks = num_full if max_blocks is None else min(max_blocks, num_full)
        hashes = seq.full_block_hashes(self.block_size)[:max_blocks]
        if self.sliding_window is not None:
            return self._window_hits(seq, hashes)
        hits: list[int] = []
        for h in hashes:
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def _window_hits(self, seq: Sequence, hashes: list[BlockHash]) -> list[int]:
        """The longest cached start when a window slides: only the blocks the window reads from there
        must be cached (each hash chains over every earlier token, so one hit vouches for the whole
        prefix); the blocks before them come back as ``FREED_BLOCK``."""
        found = [self.hash_to_block.get(h) for h in hashes]
        num_hits, num_dead, run = 0, 0, 0
        for i, block_id in enumerate(found):
            run = run + 1 if block_id is not None else 0  # cached blocks ending at block i
            dead = self.num_dead_blocks(seq, (i + 1) * self.block_size)
            if i + 1 - dead <= run:
                num_hits, num_dead = i + 1, dead
        return [FREED_BLOCK] * num_dead + [b for b in found[num_dead:num_hits] if b is not None]  # all hits

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register seq's newly full and computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        t = self.table(seq)
        num_full = min(seq.num_computed_tokens // self.block_size, len(t.block_table))
        if num_full <= t.num_hashed_blocks:
            return
        hashes = seq.full_block_hashes(self.block_size)
        stored: list[int] = []  # positions newly cached, for the event sink
        for i in range(t.num_hashed_blocks, num_full):
            block_id, h = t.block_table[i], hashes[i]
            if block_id != FREED_BLOCK and self.block_hash[block_id] is None and h not in self.hash_to_block:
                self.block_hash[block_id] = h
                self.hash_to_block[h] = block_id
                stored.append(i)
        t.num_hashed_blocks = num_full
        if stored and self.event_sink is not None:
            self._record_stored(hashes, stored)

    def _record_stored(self, hashes: list[BlockHash], stored: list[int]) -> None:
        """One event per run of consecutive newly cached blocks (a block cached before splits a run)."""
        assert self.event_sink is not None
        start = 0
        for k in range(1, len(stored) + 1):
            if k == len(stored) or stored[k] != stored[k - 1] + 1:
                first, last = stored[start], stored[k - 1]
                parent = hashes[first - 1] if first else None
                self.event_sink.record(
                    block_stored(
                        hashes[first : last + 1],
                        parent,
                        self.block_size,
                        group_idx=self.group_idx,
                        sliding_window=self.sliding_window,
                    )
                )
                start = k

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash (vLLM's ``reset_prefix_cache``); refused (False) while any block is
        referenced, since a running sequence's blocks would lose their keys under it."""
        if self.num_used_blocks:
            return False
        self.free_ids.extend(self.evictable)
        self.evictable.clear()
        self.hash_to_block.clear()
        self.block_hash = [None] * self.num_blocks
        if self.event_sink is not None:
            self.event_sink.record(AllBlocksCleared())
        return True

    # -- sliding window ------------------------------------------------------------------------------
    def num_dead_blocks(self, seq: Sequence, num_computed_tokens: int) -> int:
        """Leading blocks of seq that no query at position ``num_computed_tokens`` or later reads: those
        wholly before the next query's first key (none without a window)."""
        window = self.sliding_window
        if window is None:
            return 0
        if seq.index == 0 and seq.params.n > 1 and seq.num_output_tokens == 0:
            # not forked yet: its children start after the last full prompt block and read the window there
            fork_at = self._num_forkable_blocks(seq) * self.block_size
            num_computed_tokens = min(num_computed_tokens, fork_at)
        return max(0, num_computed_tokens - window + 1) // self.block_size

    def free_out_of_window(self, seq: Sequence) -> int:
        """Release seq's leading blocks that its window has passed (after each step); how many it freed."""
        t = self.table(seq)
        start = t.num_freed_blocks
        num_dead = min(self.num_dead_blocks(seq, seq.num_computed_tokens), len(t.block_table))
        for i in range(start, num_dead):  # oldest first, so the LRU evicts a window's history in order
            self._unref(t.block_table[i])
            t.block_table[i] = FREED_BLOCK
        t.num_freed_blocks = max(start, num_dead)
        return t.num_freed_blocks - start

    def can_ever_fit(self, seq: Sequence) -> bool:
        """Whether the whole pool could carry seq to its current length: full attention holds every
        block, a window at most the blocks it spans, so a pool a window wide carries any length."""
        capacity = self.num_blocks * self.block_size
        if seq.num_tokens <= capacity:
            return True
        window = self.sliding_window
        return window is not None and capacity >= window + self.block_size - 1

    def max_new_tokens(self, seq: Sequence, num_computed_tokens: int) -> int:
        """The most tokens seq could compute in one step from ``num_computed_tokens`` with the whole pool
        to itself (a window frees what it passed only after the step, so a chunk must fit at once)."""
        first_live = self.num_dead_blocks(seq, num_computed_tokens)
        return (first_live + self.num_blocks) * self.block_size - num_computed_tokens

    # -- allocate / free -----------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, computed_blocks: list[int], num_new_tokens: int) -> bool:
        """Whether seq can start with its cache hits plus ``num_new_tokens`` computed this step."""
        num_cached = len(computed_blocks) * self.block_size
        num_needed = self.num_blocks_for(num_cached + num_new_tokens) - len(computed_blocks)
        live = computed_blocks[self.num_dead_blocks(seq, num_cached) :]
        num_reused_free = sum(1 for b in live if self.ref_counts[b] == 0)
        return num_needed <= self.num_free_blocks - num_reused_free

    def allocate(self, seq: Sequence, computed_blocks: list[int], num_new_tokens: int) -> None:
        """Give a waiting seq its cached blocks (those its window reads) plus fresh ones for
        ``num_new_tokens``."""
        t = self.table(seq)
        assert not t.block_table, "allocate() on a sequence that already holds blocks"
        num_dead = self.num_dead_blocks(seq, len(computed_blocks) * self.block_size)
        live = computed_blocks[num_dead:]
        for block_id in live:
            self._ref(block_id)
        t.block_table = [FREED_BLOCK] * num_dead + live
        t.num_freed_blocks = num_dead
        t.num_hashed_blocks = len(computed_blocks)
        seq.num_computed_tokens = len(computed_blocks) * self.block_size
        if seq.num_output_tokens == 0 and seq.num_preemptions == 0:
            seq.num_cached_tokens = seq.num_computed_tokens
        if self.enable_prefix_caching:  # one count per pool: a two-group cache reports its first
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += seq.num_computed_tokens
        self.append_slots(seq, num_new_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(
            self.table(seq).block_table
        )
        return needed <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow seq's block table to hold ``num_new_tokens`` more computed tokens."""
        table = self.table(seq).block_table
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(table)
        for _ in range(needed):
            table.append(self._take_fresh())

    def num_forkable(self, parent: Sequence, child: Sequence, max_blocks: int | None = None) -> int:
        """Leading blocks of parent that child can share here (at most ``max_blocks``)."""
        pt = self.table(parent)
        num_shared = min(self._num_forkable_blocks(parent), len(pt.block_table))
        num_shared = min(num_shared, parent.num_computed_tokens // self.block_size)
        if max_blocks is not None:
            num_shared = min(num_shared, max_blocks)
        if pt.num_freed_blocks > self.num_dead_blocks(child, num_shared * self.block_size):
            return 0  # the parent released blocks the child's window reads
        return num_shared

    def fork(self, parent: Sequence, child: Sequence, num_shared: int | None = None) -> None:
        """Let child share parent's full prompt blocks (copy-free, ``num_shared`` of them when another KV
        group decided); it computes only the tail."""
        if num_shared is None:
            num_shared = self.num_forkable(parent, child)
        pt, ct = self.table(parent), self.table(child)
        num_dead = self.num_dead_blocks(child, num_shared * self.block_size)
        ct.block_table = [FREED_BLOCK] * num_dead + pt.block_table[num_dead:num_shared]
        ct.num_freed_blocks = num_dead
        for block_id in ct.block_table[num_dead:]:
            self._ref(block_id)
        child.num_computed_tokens = num_shared * self.block_size
        child.num_cached_tokens = parent.num_cached_tokens
        ct.num_hashed_blocks = min(num_shared, pt.num_hashed_blocks)

    def free(self, seq: Sequence) -> None:
        """Drop seq's references; blocks that hold a hash stay reusable until evicted."""
        # Tail blocks first, so the LRU evicts the end of a prefix before its start.
        t = self.table(seq)
        for block_id in reversed(t.block_table[t.num_freed_blocks :]):
            self._unref(block_id)
        t.block_table = []
        t.num_freed_blocks = 0
        seq.num_computed_tokens = 0
        t.num_hashed_blocks = 0

    def _num_forkable_blocks(self, seq: Sequence) -> int:
        """Full prompt blocks an n > 1 parent shares (the last prompt token is always recomputed)."""
        return (seq.num_prompt_tokens - 1) // self.block_size

    def _ref(self, block_id: int) -> None:
        assert block_id != FREED_BLOCK, "a freed table entry referenced"
        if self.ref_counts[block_id] == 0:
            del self.evictable[block_id]  # cache hit on a freed block: revive it
            self._note_usage()
        self.ref_counts[block_id] += 1

    def _unref(self, block_id: int) -> None:
        self.ref_counts[block_id] -= 1
        assert self.ref_counts[block_id] >= 0, f"block {block_id} freed twice"
        if self.ref_counts[block_id] == 0:
            if self.block_hash[block_id] is not None:
                self.evictable[block_id] = None
            else:
                self.free_ids.append(block_id)

    def _note_usage(self) -> None:
        self.max_num_used_blocks = max(self.max_num_used_blocks, self.num_used_blocks)

    def _take_fresh(self) -> int:
        if self.free_ids:
            block_id = self.free_ids.popleft()
        else:
            block_id, _ = self.evictable.popitem(last=False)  # evict the least recently freed
            h = self.block_hash[block_id]
            if h is not None:
                del self.hash_to_block[h]
                self.block_hash[block_id] = None
                if self.event_sink is not None:
                    self.event_sink.record(block_removed(h, group_idx=self.group_idx))
        assert self.ref_counts[block_id] == 0
        self.ref_counts[block_id] = 1
        self._note_usage()
        return block_id

    # -- checks --------------------------------------------------------------------------------------
    def check_invariants(self, seqs: Iterable[Sequence] | None = None) -> None:
        """Assert the pool is consistent: no leaked, double-freed or dangling block.

        With ``seqs`` (every live sequence), reference counts must equal the occurrences in the live
        part of the block tables, and no sequence may have freed a block its window still reads.
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
                t = self.table(seq)
                num_freed = t.num_freed_blocks
                assert all(b == FREED_BLOCK for b in t.block_table[:num_freed]), "freed entries mislaid"
                assert num_freed <= self.num_dead_blocks(seq, seq.num_computed_tokens), (
                    f"sequence {seq.seq_id} freed a block its window still reads"
                )
                for block_id in t.block_table[num_freed:]:
                    assert 0 <= block_id < self.num_blocks, f"sequence {seq.seq_id} holds block {block_id}"
                    counts[block_id] += 1
            assert counts == self.ref_counts, "reference counts differ from the live block tables"
