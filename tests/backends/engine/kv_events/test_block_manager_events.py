"""The block manager's prefix-cache events: stored once per newly cached block, removed on eviction,
cleared on reset, nothing at all without a sink."""

from __future__ import annotations

import itertools

from backends.engine.block_manager import BlockManager
from backends.engine.kv_events.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    external_block_hash,
)
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence

_ids = itertools.count()


class ListSink:
    def __init__(self) -> None:
        self.events: list[KVEvent] = []

    def record(self, event: KVEvent) -> None:
        self.events.append(event)

    def drain(self) -> list[KVEvent]:
        events, self.events = self.events, []
        return events


def seq(tokens: list[int]) -> Sequence:
    i = next(_ids)
    return Sequence(seq_id=i, request_id=f"r{i}", token_ids=list(tokens), params=SamplingParams(), arrival=i)


def start(bm: BlockManager, s: Sequence) -> None:
    """Admit s, compute its whole prompt, register its full blocks (what one step does)."""
    hits = bm.get_computed_blocks(s)
    num_new = s.num_tokens - len(hits) * bm.block_size
    bm.allocate(s, hits, num_new)
    s.num_computed_tokens = s.num_tokens
    bm.cache_full_blocks(s)


def hashes_of(s: Sequence, bm: BlockManager) -> list[int]:
    return [external_block_hash(h) for h in s.full_block_hashes(bm.block_size)]


def test_a_prompts_full_blocks_are_stored_in_one_event() -> None:
    sink = ListSink()
    bm = BlockManager(8, 4, event_sink=sink)
    a = seq(list(range(10)))  # two full blocks and a partial one
    start(bm, a)
    (event,) = sink.drain()
    assert isinstance(event, BlockStored)
    assert event.block_hashes == hashes_of(a, bm)[:2] and event.parent_block_hash is None
    assert event.token_ids == list(range(8)) and event.block_size == 4
    assert event.group_idx == 0 and event.medium == "GPU" and event.kv_cache_spec_kind == "full_attention"
    a.token_ids.extend([10, 11])  # decode fills the third block
    a.num_computed_tokens = 12
    bm.cache_full_blocks(a)
    (event,) = sink.drain()
    assert isinstance(event, BlockStored)
    assert event.block_hashes == hashes_of(a, bm)[2:3] and event.token_ids == [8, 9, 10, 11]
    assert event.parent_block_hash == hashes_of(a, bm)[1]
    bm.free(a)
    assert sink.drain() == []  # freed blocks stay cached: nothing to tell


def test_a_shared_prefix_is_not_stored_twice() -> None:
    sink = ListSink()
    bm = BlockManager(16, 4, event_sink=sink)
    a, b = seq([*range(8), 50, 51, 52, 53, 54]), seq([*range(8), 60, 61, 62, 63, 64])
    start(bm, a)
    sink.drain()
    start(bm, b)  # hits a's first two blocks
    (event,) = sink.drain()
    assert isinstance(event, BlockStored)
    assert event.block_hashes == hashes_of(b, bm)[2:3] and event.token_ids == [60, 61, 62, 63]
    assert event.parent_block_hash == hashes_of(a, bm)[1]
    # the same prompt computed at once by another sequence: its blocks are no new cache entries
    c = seq([*range(8), 50, 51, 52, 53, 54])
    hits = bm.get_computed_blocks(c)
    bm.allocate(c, hits, c.num_tokens - len(hits) * 4)
    c.num_computed_tokens = c.num_tokens
    bm.cache_full_blocks(c)
    assert sink.drain() == []
    for s in (a, b, c):
        bm.free(s)
    bm.check_invariants([])


def test_eviction_under_memory_pressure_removes_the_hashes() -> None:
    sink = ListSink()
    bm = BlockManager(4, 4, event_sink=sink)
    a = seq(list(range(13)))  # 3 full blocks + 1: the whole pool
    start(bm, a)
    stored = sink.drain()
    bm.free(a)
    b = seq([100 + t for t in range(9)])  # 3 blocks: the free one, then two evictions (a's tail first)
    start(bm, b)
    *removed, new = sink.drain()
    assert all(isinstance(e, BlockRemoved) and e.group_idx == 0 and e.medium == "GPU" for e in removed)
    evicted = [h for e in removed if isinstance(e, BlockRemoved) for h in e.block_hashes]
    assert evicted == [hashes_of(a, bm)[2], hashes_of(a, bm)[1]]
    assert isinstance(new, BlockStored) and new.block_hashes == hashes_of(b, bm)[:2]
    assert isinstance(stored[0], BlockStored) and len(stored[0].block_hashes) == 3
    bm.free(b)


def test_reset_clears_the_cache_once_nothing_runs() -> None:
    sink = ListSink()
    bm = BlockManager(8, 4, event_sink=sink)
    a = seq(list(range(9)))
    start(bm, a)
    sink.drain()
    assert not bm.reset_prefix_cache()  # a still holds its blocks
    assert sink.drain() == []
    bm.free(a)
    assert bm.reset_prefix_cache()
    assert sink.drain() == [AllBlocksCleared()]
    assert bm.get_computed_blocks(seq(list(range(9)))) == [] and bm.num_free_blocks == 8
    bm.check_invariants([])


def test_the_sliding_group_reports_its_index_and_window() -> None:
    sink = ListSink()
    bm = BlockManager(8, 4, sliding_window=8, is_sliding_group=True)
    bm.attach_event_sink(sink, group_idx=1)
    a = seq(list(range(9)))
    start(bm, a)
    (event,) = sink.drain()
    assert isinstance(event, BlockStored)
    assert event.group_idx == 1 and event.kv_cache_spec_kind == "sliding_window"
    assert event.kv_cache_spec_sliding_window == 8
    bm.free(a)


def test_no_sink_no_events_and_no_prefix_cache_no_events() -> None:
    bm = BlockManager(4, 4)
    start(bm, seq(list(range(9))))  # no sink: nothing to call
    sink = ListSink()
    off = BlockManager(4, 4, enable_prefix_caching=False, event_sink=sink)
    start(off, seq(list(range(9))))
    assert sink.events == []
