"""The block index: stored, removed, cleared, forgotten (restart, staleness), bounded; the gateway's own
chain hashes, whatever the engine's hash function."""

from __future__ import annotations

from gateway.kv_routing.events import decode_batch
from gateway.kv_routing.index import BlockIndex, chain_hash, prompt_chain
from tests.support.kv_events import batch, cleared, removed, stored

A = ("pool", "a")
B = ("pool", "b")
PROMPT = list(range(100, 140))  # 40 tokens: 10 blocks of 4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def apply(index: BlockIndex, key: tuple[str, str], *events: dict, **bounds: float) -> None:
    index.apply(key, decode_batch(batch(list(events))), **bounds)  # type: ignore[arg-type]


def store_prompt(
    index: BlockIndex,
    key: tuple[str, str],
    num_blocks: int,
    *,
    salt: str = "",
    cache_salt: str | None = None,
    **bounds: float,
) -> None:
    """As an engine: the prompt's first ``num_blocks`` blocks, in two events (a child names its parent);
    ``salt`` prefixes the engine's hashes, ``cache_salt`` goes in the first block's ``extra_keys``."""
    half = num_blocks // 2
    first = [f"{salt}e{i}" for i in range(half)]
    rest = [f"{salt}e{i}" for i in range(half, num_blocks)]
    extra_keys = None if cache_salt is None else [[cache_salt]] + [None] * (half - 1)
    apply(index, key, stored(first, None, PROMPT[: half * 4], 4, extra_keys=extra_keys), **bounds)
    apply(index, key, stored(rest, first[-1], PROMPT[half * 4 : num_blocks * 4], 4), **bounds)


def test_a_replica_scores_the_leading_blocks_it_holds() -> None:
    index = BlockIndex()
    store_prompt(index, A, 8)
    chain = prompt_chain(PROMPT, 4)
    assert len(chain) == 10 and index.block_size(A) == 4
    assert index.num_hits(A, chain) == 8
    assert index.num_hits(B, chain) == 0 and not index.is_live(B)
    assert index.num_hits(A, prompt_chain([1, *PROMPT], 4)) == 0  # a different head shares nothing


def test_chain_hashes_do_not_depend_on_the_engines_hashes() -> None:
    index = BlockIndex()
    store_prompt(index, A, 4, salt="x")
    store_prompt(index, B, 4, salt="other-engine-")
    chain = prompt_chain(PROMPT, 4)
    assert index.num_hits(A, chain) == index.num_hits(B, chain) == 4
    assert chain[1] == chain_hash(chain_hash(None, PROMPT[:4]), PROMPT[4:8])


def test_removed_blocks_stop_counting_from_the_first_missing_one() -> None:
    index = BlockIndex()
    store_prompt(index, A, 8)
    apply(index, A, removed(["e5"]))
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 5
    apply(index, A, removed(["e0"], medium="CPU"))  # an offloaded copy going away: the GPU one stays
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 5


def test_a_block_whose_parent_is_unknown_is_skipped_and_offloaded_blocks_do_not_count() -> None:
    index = BlockIndex()
    apply(index, A, stored(["e1"], "never-seen", PROMPT[4:8], 4))
    apply(index, A, stored(["e0"], None, PROMPT[:4], 4, medium="CPU"))
    apply(index, A, {**stored(["s0"], None, PROMPT[:4], 4), "group_idx": 1})  # a hybrid's sliding layers
    assert index.num_blocks(A) == 0 and index.is_live(A)


def test_cleared_and_forgotten_replicas_hold_nothing() -> None:
    index = BlockIndex()
    store_prompt(index, A, 4)
    apply(index, A, cleared())
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 0 and index.is_live(A)
    store_prompt(index, A, 4)
    index.forget(A)  # a restart, or a gap the replay could not fill
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 0 and not index.is_live(A)
    assert index.num_forgotten == 1
    store_prompt(index, A, 2)  # the restarted engine's events rebuild it
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 2


def test_a_replica_whose_events_stop_goes_stale_and_is_forgotten() -> None:
    clock = Clock()
    index = BlockIndex(clock=clock)
    store_prompt(index, A, 4, stale_after_s=30.0)
    clock.now += 20
    index.touch(A)  # a repeat arriving still counts as events flowing
    clock.now += 29
    assert index.is_live(A)
    clock.now += 2
    assert not index.is_live(A)
    assert index.num_blocks(A) == 0 and index.num_forgotten == 1


def test_each_replica_is_bounded_and_a_used_prefix_outlives_others() -> None:
    index = BlockIndex()
    store_prompt(index, A, 4, max_blocks=6)  # e0..e3
    apply(index, A, stored(["o0", "o1"], None, range(8), 4), max_blocks=6)  # another prompt: 6 blocks
    apply(index, A, stored(["e4"], "e3", PROMPT[16:20], 4), max_blocks=6)  # the prompt grows: used again
    assert index.num_blocks(A) == 6
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 5  # the other prompt's oldest block went
    assert index.num_hits(A, prompt_chain(list(range(8)), 4)) == 0


def test_two_engine_blocks_with_one_chain_hash_count_until_both_go() -> None:
    index = BlockIndex()
    # an engine that salts its hashes but does not say so (no extra_keys): one token sequence, two
    # engine blocks, one chain
    store_prompt(index, A, 2, salt="t1-")
    store_prompt(index, A, 2, salt="t2-")
    apply(index, A, removed(["t1-e0", "t1-e1"]))
    assert index.num_hits(A, prompt_chain(PROMPT, 4)) == 2


def test_a_salted_prompt_matches_only_blocks_cached_for_its_salt() -> None:
    index = BlockIndex()
    store_prompt(index, A, 8, salt="t1-", cache_salt="tenant-1")
    store_prompt(index, B, 8)  # unsalted
    salted, unsalted = prompt_chain(PROMPT, 4, "tenant-1"), prompt_chain(PROMPT, 4)
    assert salted[0] == chain_hash(None, PROMPT[:4], ("tenant-1",))
    assert salted[1] == chain_hash(salted[0], PROMPT[4:8])  # the salt is in the first block's hash only
    assert index.num_hits(A, salted) == 8
    assert index.num_hits(A, prompt_chain(PROMPT, 4, "tenant-2")) == 0  # another tenant's copy: no hit
    assert index.num_hits(A, unsalted) == 0
    assert index.num_hits(B, unsalted) == 8 and index.num_hits(B, salted) == 0
    store_prompt(index, A, 4, salt="t2-", cache_salt="tenant-2")  # the same tokens for tenant 2
    assert index.num_hits(A, prompt_chain(PROMPT, 4, "tenant-2")) == 4
    apply(index, A, removed(["t1-e0"]))
    assert index.num_hits(A, salted) == 0 and index.num_hits(A, prompt_chain(PROMPT, 4, "tenant-2")) == 4


def test_retain_drops_replicas_the_policy_no_longer_names() -> None:
    index = BlockIndex()
    store_prompt(index, A, 2)
    store_prompt(index, B, 2)
    index.retain([B])
    assert not index.is_live(A) and index.is_live(B)
