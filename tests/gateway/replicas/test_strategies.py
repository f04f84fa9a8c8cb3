"""Each balancing strategy on its own, over hand-made replica states."""

from __future__ import annotations

from collections import Counter

from gateway.replicas.balancer import ReplicaState
from gateway.replicas.breaker import Breaker
from gateway.replicas.config import BalancerConfig, BreakerConfig
from gateway.replicas.pools import Replica
from gateway.replicas.strategies import (
    LeastOutstanding,
    LoadAware,
    RoundRobin,
    SmoothWeighted,
    build_strategy,
)


def states(*weights: float) -> tuple[ReplicaState, ...]:
    return tuple(
        ReplicaState(
            "p",
            Replica(base_url=f"http://r{i}:8000/v1", model="m", weight=w, name="abcdefgh"[i]),
            breaker=Breaker(BreakerConfig(failure_threshold=1, open_s=100)),
        )
        for i, w in enumerate(weights)
    )


def labels(picks: list[ReplicaState | None]) -> str:
    return "".join(p.label if p else "-" for p in picks)


def test_round_robin_cycles_and_skips_open_breakers_and_excluded() -> None:
    pool = states(1, 1, 1)
    rr = RoundRobin()
    assert labels([rr.choose(pool, (), 0.0, None) for _ in range(6)]) == "abcabc"
    pool[1].breaker.record_failure(0.0)
    assert labels([rr.choose(pool, (), 0.0, None) for _ in range(4)]) == "acac"
    assert rr.choose(pool, (pool[0],), 0.0, None) is pool[2]
    assert rr.choose(pool, (pool[0], pool[2]), 0.0, None) is None


def test_round_robin_on_an_empty_pool() -> None:
    assert RoundRobin().choose((), (), 0.0, None) is None


def test_smooth_weighted_spreads_like_nginx() -> None:
    pool = states(5, 1, 1)
    wrr = SmoothWeighted()
    assert labels([wrr.choose(pool, (), 0.0, None) for _ in range(7)]) == "aabacaa"
    counts = Counter(labels([wrr.choose(pool, (), 0.0, None) for _ in range(700)]))
    assert counts == {"a": 500, "b": 100, "c": 100}


def test_smooth_weighted_skips_unusable_and_keeps_proportions_among_the_rest() -> None:
    pool = states(3, 1, 2)
    wrr = SmoothWeighted()
    pool[0].breaker.record_failure(0.0)
    counts = Counter(labels([wrr.choose(pool, (), 0.0, None) for _ in range(300)]))
    assert counts == {"b": 100, "c": 200}


def test_least_outstanding_is_weight_aware_and_rotates_ties() -> None:
    lo = LeastOutstanding()
    idle = states(1, 1, 1)
    assert Counter(labels([lo.choose(idle, (), 0.0, None) for _ in range(300)])) == {
        "a": 100,
        "b": 100,
        "c": 100,
    }
    pool = states(1, 1, 2)
    assert {lo.choose(pool, (), 0.0, None) for _ in range(10)} == {pool[2]}  # idle: the heaviest wins
    pool[0].outstanding, pool[1].outstanding, pool[2].outstanding = 2, 1, 3
    # scores (n+1)/w: a 3, b 2, c 2 -> b or c, never a
    assert {lo.choose(pool, (), 0.0, None) for _ in range(10)} == {pool[1], pool[2]}
    pool[2].outstanding = 4  # c 2.5
    assert {lo.choose(pool, (), 0.0, None) for _ in range(10)} == {pool[1]}


def test_least_outstanding_follows_acquire_and_release() -> None:
    pool = states(1, 1, 1)
    lo = LeastOutstanding()
    chosen = [lo.choose(pool, (), 0.0, None) for _ in range(3)]
    for state in chosen:
        assert state is not None
        state.acquire()
    assert {s.outstanding for s in pool} == {1}
    pool[1].release()
    assert lo.choose(pool, (), 0.0, None) is pool[1]


def test_cap_skips_saturated_replicas() -> None:
    pool = states(1, 1)
    pool[0].outstanding = 4
    pool[1].outstanding = 4
    for strategy in (RoundRobin(), SmoothWeighted(), LeastOutstanding(), LoadAware()):
        assert strategy.choose(pool, (), 0.0, 4) is None, strategy.name
        assert strategy.choose(pool, (), 0.0, 5) is not None, strategy.name


def test_load_aware_uses_fresh_scraped_load_and_ignores_stale() -> None:
    pool = states(1, 1)
    la = LoadAware(waiting_weight=1.0, kv_cache_weight=4.0)
    pool[0].num_waiting, pool[0].kv_cache_usage, pool[0].load_fresh_until = 3, 0.5, 10.0
    assert la.load(pool[0], 5.0) == 5.0
    assert {la.choose(pool, (), 5.0, None) for _ in range(5)} == {pool[1]}
    pool[1].outstanding = 6  # our own in-flight count outweighs a's queue
    assert la.choose(pool, (), 5.0, None) is pool[0]
    pool[1].outstanding = 0
    assert la.load(pool[0], 11.0) == 0.0  # stale: only the live count
    assert {la.choose(pool, (), 11.0, None) for _ in range(4)} == {pool[0], pool[1]}


def test_build_strategy_by_name() -> None:
    config = BalancerConfig(strategy="load_aware", kv_cache_weight=2.0)
    built = build_strategy("load_aware", config)
    assert isinstance(built, LoadAware) and built.kv_cache_weight == 2.0
    assert build_strategy("round_robin").name == "round_robin"
    assert build_strategy("weighted").name == "weighted"
    assert build_strategy("least_outstanding").name == "least_outstanding"


def test_load_aware_counts_what_other_gateways_run() -> None:
    pool = states(1, 1)
    la = LoadAware(waiting_weight=1.0, kv_cache_weight=4.0)
    pool[0].num_running, pool[0].load_fresh_until = 3, 10.0  # requests other gateways sent it
    assert la.load(pool[0], 5.0) == 3.0
    assert {la.choose(pool, (), 5.0, None) for _ in range(4)} == {pool[1]}
    pool[0].outstanding = pool[0].outstanding_at_scrape = 2  # ours are among the 3: not counted twice
    assert la.load(pool[0], 5.0) == 3.0
    pool[0].outstanding = 5  # ours sent since the scrape, beside the other gateways' 1
    assert la.load(pool[0], 5.0) == 6.0
    pool[0].outstanding = 0  # ours ended since the scrape: only the others' 1 is left
    assert la.load(pool[0], 5.0) == 1.0
    assert la.load(pool[0], 11.0) == 0.0  # stale: only the live count


def test_ties_start_at_a_different_replica_in_different_processes() -> None:
    pool = states(1, 1, 1, 1)
    firsts = {LeastOutstanding().choose(pool, (), 0.0, None) for _ in range(64)}
    assert len(firsts) > 1  # a fleet of gateways seeing an idle pool spreads its first requests
