"""BlockManager with fake sequences and no model."""

from __future__ import annotations

import itertools

import pytest

from backends.engine import block_hash
from backends.engine.block_manager import BlockManager
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence

_ids = itertools.count()


def seq(tokens: list[int], salt: str | None = None) -> Sequence:
    n = next(_ids)
    return Sequence(
        seq_id=n,
        request_id=f"r{n}",
        token_ids=list(tokens),
        params=SamplingParams(),
        arrival=n,
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
