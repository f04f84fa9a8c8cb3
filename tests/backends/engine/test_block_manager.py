"""BlockManager with fake sequences and no model."""

from __future__ import annotations

import itertools

import pytest

from backends.engine import block_hash
from backends.engine.block_manager import BlockManager
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import FREED_BLOCK, Sequence

_ids = itertools.count()


def seq(tokens: list[int], salt: str | None = None, n: int = 1) -> Sequence:
    i = next(_ids)
    return Sequence(
        seq_id=i,
        request_id=f"r{i}",
        token_ids=list(tokens),
        params=SamplingParams(n=n),
        arrival=i,
        cache_salt=salt,
    )


def start(bm: BlockManager, s: Sequence) -> None:
    """Admit s, compute its whole prompt, register its full blocks (what one step does)."""
    hits = bm.get_computed_blocks(s)
    num_new = s.num_tokens - len(hits) * bm.block_size
    assert bm.can_allocate(s, hits, num_new)
    bm.allocate(s, hits, num_new)
    s.num_computed_tokens = s.num_tokens
    bm.cache_full_blocks(s)


def test_allocate_and_free_return_every_block() -> None:
    bm = BlockManager(8, 4)
    a = seq(list(range(10)))
    start(bm, a)
    assert len(a.block_table) == 3 and bm.num_free_blocks == 5
    bm.check_invariants([a])
    bm.free(a)
    assert bm.num_free_blocks == 8
    bm.check_invariants([])


def test_prefix_hit_shares_blocks_with_refcounts() -> None:
    bm = BlockManager(8, 4)
    a, b = seq(list(range(10))), seq([*range(8), 99, 98, 97])
    start(bm, a)
    start(bm, b)
    assert b.block_table[:2] == a.block_table[:2] and b.num_cached_tokens == 8
    assert bm.ref_counts[a.block_table[0]] == 2
    assert bm.prefix_cache_hits == 8 and bm.prefix_cache_queries == 21
    bm.check_invariants([a, b])
    bm.free(a)
    bm.free(b)
    bm.check_invariants([])


def test_freed_blocks_stay_cached_until_evicted_lru() -> None:
    bm = BlockManager(4, 4)
    a = seq(list(range(8)))
    start(bm, a)
    bm.free(a)
    assert bm.num_free_blocks == 4 and len(bm.evictable) == 2
    b = seq(list(range(9)))
    assert len(bm.get_computed_blocks(b)) == 2  # still findable after free
    c = seq(list(range(100, 116)))  # needs all 4 blocks: evicts both cached ones
    start(bm, c)
    assert not bm.hash_to_block or all(h is not None for h in bm.block_hash if h)
    assert bm.get_computed_blocks(seq(list(range(9)))) == []
    bm.check_invariants([c])


def test_at_least_one_token_is_left_to_compute() -> None:
    bm = BlockManager(8, 4)
    a = seq(list(range(8)))
    start(bm, a)
    assert len(bm.get_computed_blocks(seq(list(range(8))))) == 1


def test_cache_salt_separates_hashes() -> None:
    bm = BlockManager(8, 4)
    start(bm, seq(list(range(9)), salt="a"))
    assert bm.get_computed_blocks(seq(list(range(9)), salt="b")) == []
    assert len(bm.get_computed_blocks(seq(list(range(9)), salt="a"))) == 2


@pytest.fixture
def colliding_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block digests alike, as on a hash collision: lookups must still tell blocks apart."""
    monkeypatch.setattr(block_hash, "block_digest", lambda parent, data: bytes(block_hash.DIGEST_SIZE))


@pytest.mark.usefixtures("colliding_digests")
def test_a_digest_collision_never_serves_another_prompts_block() -> None:
    bm = BlockManager(8, 4)
    a = seq(list(range(9)))
    start(bm, a)
    other = seq([*range(100, 104), *range(4, 9)])
    assert other.full_block_hashes(4)[0].digest == a.block_hashes[0].digest  # the digests do collide
    assert bm.get_computed_blocks(other) == []
    tail = seq([*range(4), 50, 51, 52, 53, 8])  # first block equal, second differs
    assert bm.get_computed_blocks(tail) == a.block_table[:1]
    assert bm.get_computed_blocks(seq(list(range(9)))) == a.block_table[:2]  # the same prompt still hits
    start(bm, other)
    assert set(other.block_table).isdisjoint(a.block_table)
    bm.check_invariants([a, other])


@pytest.mark.usefixtures("colliding_digests")
def test_a_digest_collision_never_crosses_tenants() -> None:
    bm = BlockManager(8, 4)
    a = seq(list(range(9)), salt="tenant-a")
    start(bm, a)
    assert bm.get_computed_blocks(seq(list(range(9)), salt="tenant-b")) == []
    assert bm.get_computed_blocks(seq(list(range(9)))) == []
    assert bm.get_computed_blocks(seq(list(range(9)), salt="tenant-a")) == a.block_table[:2]


def test_fork_shares_full_prompt_blocks() -> None:
    bm = BlockManager(8, 4, enable_prefix_caching=False)
    parent = seq(list(range(10)))
    start(bm, parent)
    child = seq(list(range(10)))
    bm.fork(parent, child)
    assert child.block_table == parent.block_table[:2] and child.num_computed_tokens == 8
    bm.check_invariants([parent, child])
    bm.append_slots(child, 2)
    assert len(child.block_table) == 3 and child.block_table[2] != parent.block_table[2]
    bm.free(parent)
    bm.free(child)
    bm.check_invariants([])
    assert bm.num_free_blocks == 8


def test_double_free_is_caught() -> None:
    bm = BlockManager(4, 4)
    a = seq(list(range(5)))
    start(bm, a)
    table = list(a.block_table)
    bm.free(a)
    a.block_table = table
    with pytest.raises(AssertionError):
        bm.free(a)


def test_can_allocate_counts_revived_blocks() -> None:
    bm = BlockManager(3, 4)
    a = seq(list(range(8)))
    start(bm, a)
    bm.free(a)  # two cached free blocks, one plain free block
    b = seq([*range(8), 1, 2, 3])
    hits = bm.get_computed_blocks(b)
    assert len(hits) == 2
    assert bm.can_allocate(b, hits, 3)  # the two hits plus the one plain free block
    c = seq([*range(8), *range(5)])  # one block too many once the hits are counted as used
    assert not bm.can_allocate(c, bm.get_computed_blocks(c), 5)


# -- sliding window: blocks the window has passed go back to the pool ------------------------------------
# window 6, blocks of 4: a query at position p reads keys from p - 5, so after p tokens the blocks wholly
# before p - 5 are dead, and a sequence holds at most 2 blocks between steps, 3 during one.


def decode(bm: BlockManager, s: Sequence, num_tokens: int) -> int:
    """Grow s one token a step as the engine does; the most blocks it held at once (live entries)."""
    most = 0
    for t in range(num_tokens):
        s.token_ids.append(t % 50)
        assert bm.can_append(s, 1)
        bm.append_slots(s, 1)
        most = max(most, len(s.block_table) - s.num_freed_blocks)
        s.num_computed_tokens += 1
        bm.cache_full_blocks(s)
        bm.free_out_of_window(s)
        bm.check_invariants([s])
    return most


def test_window_frees_leading_blocks_into_the_lru() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    a = seq(list(range(14)))
    start(bm, a)  # the next query (position 14) reads keys from 9: blocks 0 and 1 are dead
    assert bm.free_out_of_window(a) == 2
    assert a.block_table[:2] == [FREED_BLOCK, FREED_BLOCK] and a.num_freed_blocks == 2
    assert len(bm.evictable) == 2 and bm.num_used_blocks == 2  # still findable by their hashes
    bm.check_invariants([a])
    assert bm.free_out_of_window(a) == 0
    bm.free(a)
    assert bm.num_free_blocks == 8
    bm.check_invariants([])


def test_window_frees_unhashed_blocks_to_the_free_list() -> None:
    bm = BlockManager(8, 4, enable_prefix_caching=False, sliding_window=6)
    a = seq(list(range(14)))
    start(bm, a)
    bm.free_out_of_window(a)
    assert not bm.evictable and len(bm.free_ids) == 6
    bm.check_invariants([a])


def test_without_a_window_nothing_is_freed() -> None:
    bm = BlockManager(8, 4)
    a = seq(list(range(14)))
    start(bm, a)
    assert bm.free_out_of_window(a) == 0 and FREED_BLOCK not in a.block_table


def test_a_sequence_outgrows_the_pool_holding_only_its_window() -> None:
    bm = BlockManager(3, 4, sliding_window=6)  # 12 slots; the sequence grows to 45 tokens
    a = seq(list(range(5)))
    start(bm, a)
    bm.free_out_of_window(a)
    assert decode(bm, a, 40) == 3
    assert bm.max_num_used_blocks == 3 and a.num_freed_blocks == 10  # keys from 40 on: blocks 10, 11
    bm.free(a)
    bm.check_invariants([])
    assert bm.num_free_blocks == 3


def test_can_ever_fit_and_max_new_tokens_follow_the_window() -> None:
    long = seq(list(range(40)))
    assert not BlockManager(3, 4).can_ever_fit(long)  # full attention must hold all 40 tokens
    assert BlockManager(3, 4, sliding_window=6).can_ever_fit(long)  # 12 slots span 6 keys plus a block
    assert not BlockManager(3, 4, sliding_window=10).can_ever_fit(long)
    bm = BlockManager(3, 4, sliding_window=6)
    assert bm.max_new_tokens(long, 0) == 12
    assert bm.max_new_tokens(long, 14) == 6  # blocks 2..4 from the window's first key (9) on


def test_check_invariants_catches_a_block_freed_inside_the_window() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    a = seq(list(range(14)))
    start(bm, a)
    bm.free_out_of_window(a)
    bm._unref(a.block_table[2])  # block 2 holds key 9, which the next query reads
    a.block_table[2] = FREED_BLOCK
    a.num_freed_blocks = 3
    with pytest.raises(AssertionError, match="window still reads"):
        bm.check_invariants([a])


def test_freed_entries_are_never_freed_again() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    a = seq(list(range(14)))
    start(bm, a)
    bm.free_out_of_window(a)
    bm.free(a)
    assert bm.num_free_blocks == 8 and all(rc == 0 for rc in bm.ref_counts)
    bm.check_invariants([])


def test_fork_after_freeing_keeps_the_childs_window() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    parent = seq(list(range(14)), n=2)
    hits = bm.get_computed_blocks(parent)
    bm.allocate(parent, hits, 10)  # a first prefill chunk of 10
    parent.num_computed_tokens = 10
    bm.cache_full_blocks(parent)
    assert bm.free_out_of_window(parent) == 1  # keys from 5 on: block 0 is dead
    bm.append_slots(parent, 4)
    parent.num_computed_tokens = 14
    bm.cache_full_blocks(parent)
    # not forked yet: the children resume at 12 and read from key 7 (block 1), so block 1 stays
    assert bm.free_out_of_window(parent) == 0
    child = seq(list(range(14)), n=2)
    child.index = 1
    bm.fork(parent, child)
    assert child.block_table == [FREED_BLOCK, *parent.block_table[1:3]] and child.num_computed_tokens == 12
    bm.check_invariants([parent, child])
    parent.token_ids.append(7)  # its first sampled token: from now on it frees like any sequence
    assert bm.free_out_of_window(parent) == 1
    assert bm.ref_counts[child.block_table[1]] == 1  # the child alone holds block 1 now
    bm.check_invariants([parent, child])
    bm.free(parent)
    bm.free(child)
    bm.check_invariants([])
    assert bm.num_free_blocks == 8


def test_fork_recomputes_when_the_parent_freed_the_childs_window() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    parent = seq(list(range(14)))  # n == 1: nothing is held back for a child
    start(bm, parent)
    bm.free_out_of_window(parent)  # blocks 0 and 1 gone; a child resuming at 12 would read block 1
    child = seq(list(range(14)))
    bm.fork(parent, child)
    assert child.block_table == [] and child.num_computed_tokens == 0
    bm.check_invariants([parent, child])


def test_window_hits_need_only_the_blocks_the_window_reads() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    a = seq(list(range(20)))
    start(bm, a)
    bm.free_out_of_window(a)  # blocks 0..2 to the LRU, oldest first
    c = seq(list(range(100, 116)))
    start(bm, c)  # four fresh blocks: three plain ones, then block 0 is evicted
    assert a.block_hashes[0] not in bm.hash_to_block and a.block_hashes[1] in bm.hash_to_block
    b = seq([*range(20), 99])
    hits = bm.get_computed_blocks(b)
    # resuming at 20 reads keys from 15: blocks 3 and 4, still held by a; block 0's loss does not matter
    assert hits == [FREED_BLOCK] * 3 + a.block_table[3:5]
    start(bm, b)
    assert b.num_cached_tokens == 20 and b.num_freed_blocks == 3
    assert bm.ref_counts[a.block_table[3]] == 2
    bm.check_invariants([a, b, c])
    assert bm.get_computed_blocks(seq([*range(20), 99])) == hits


def test_window_hits_stop_at_a_gap_inside_the_window() -> None:
    bm = BlockManager(8, 4, sliding_window=6)
    start(bm, seq(list(range(8))))  # only blocks 0 and 1 are cached
    assert bm.get_computed_blocks(seq([*range(20), 99])) == bm.get_computed_blocks(seq(list(range(9))))
    hits = bm.get_computed_blocks(seq([*range(20), 99]))
    assert len(hits) == 2 and FREED_BLOCK not in hits


def test_can_allocate_counts_only_the_live_hits() -> None:
    bm = BlockManager(5, 4, sliding_window=6)
    a = seq(list(range(20)))
    start(bm, a)
    bm.free_out_of_window(a)
    bm.free(a)  # all five blocks free, all hashed
    b = seq([*range(20), 99])
    hits = bm.get_computed_blocks(b)
    assert hits[:3] == [FREED_BLOCK] * 3
    # two live hits revived and one fresh block: three of five, where full attention would need six
    assert bm.can_allocate(b, hits, 1)
    start(bm, b)
    assert bm.num_used_blocks == 3
    bm.check_invariants([b])
