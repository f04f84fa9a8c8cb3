"""The balancer: reloads, breakers in ``pick``, affinity preference, saturation, free slots and
releases, fallbacks, config."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
import yaml

from gateway.policy import Policy, parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.config import (
    BalancerConfig,
    BreakerConfig,
    HealthConfig,
    PoolRouting,
    QueueConfig,
    RoutingConfig,
    check_routing,
    convert_routing,
)
from gateway.replicas.fallback import fallback_problems, pool_order


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(**pools: int) -> Policy:
    """A policy with pools of n replicas each, named <pool>-<i>."""
    document: dict[str, Any] = {
        "pools": {
            name: {
                "replicas": [
                    {"base_url": f"http://{name}{i}.local:8000/v1", "model": "m", "name": f"{name}-{i}"}
                    for i in range(n)
                ]
            }
            for name, n in pools.items()
        }
    }
    return parse_policy(document, "test.yaml")


def routing(**pools: PoolRouting) -> RoutingConfig:
    return RoutingConfig(breaker=BreakerConfig(failure_threshold=2, open_s=10), pools=pools)


def fail(balancer: Balancer, state: ReplicaState, times: int) -> None:
    for _ in range(times):
        balancer.record_failure(state)


def test_reload_keeps_replica_state_and_drops_removed_replicas() -> None:
    balancer = Balancer(routing=routing(), environ={"KEY": "sk-1"})
    document = {
        "pools": {
            "small": {
                "replicas": [
                    {"base_url": "http://a:1/v1", "model": "m", "api_key_env": "KEY"},
                    {"base_url": "http://b:1/v1", "model": "m"},
                ]
            }
        }
    }
    balancer.update(parse_policy(document, "p"))
    a, b = balancer.replicas("small")
    a.acquire()
    fail(balancer, b, 2)
    assert a.headers == {"Authorization": "Bearer sk-1"} and b.headers == {}
    document["pools"]["small"]["replicas"] = [document["pools"]["small"]["replicas"][1]]
    balancer.update(parse_policy(document, "p"))
    assert balancer.replicas("small") == (b,)
    assert b.breaker.state == "open"  # a reload never forgets an open breaker
    assert list(balancer.all_replicas()) == [b]
    assert balancer.replicas("nope") == ()


def test_health_and_metrics_urls_come_from_the_origin_or_an_override() -> None:
    config = RoutingConfig(
        health=HealthConfig(path="/healthz", metrics_path="/stats"),
        pools={"small": PoolRouting(health_urls={"small-1": "http://side:9/ok"})},
    )
    balancer = Balancer(routing=config)
    balancer.update(policy(small=2))
    s0, s1 = balancer.replicas("small")
    assert s0.health_url == "http://small0.local:8000/healthz"
    assert s0.metrics_url == "http://small0.local:8000/stats"
    assert s1.health_url == "http://side:9/ok"
    assert s0.scrape_interval_s == 0


def test_the_policy_routing_section_is_read_when_present() -> None:
    base = policy(small=1)
    config = RoutingConfig(balancer=BalancerConfig(strategy="load_aware"))
    balancer = Balancer()
    balancer.update(cast(Policy, SimpleNamespace(pools=base.pools, routing=config)))
    assert balancer.routing is config
    (state,) = balancer.replicas("small")
    assert state.scrape_interval_s == 2.0  # load_aware turns scraping on


def test_failures_open_the_breaker_pick_skips_it_and_has_healthy_follows() -> None:
    clock = Clock()
    changes: list[tuple[str, str, str]] = []
    balancer = Balancer(
        routing=routing(),
        clock=clock,
        on_breaker_change=lambda s, old, new: changes.append((s.label, old, new)),
    )
    balancer.update(policy(small=2))
    a, b = balancer.replicas("small")
    fail(balancer, a, 2)
    assert a.num_failures == 2
    assert {balancer.pick("small") for _ in range(10)} == {b}
    assert balancer.has_healthy()
    fail(balancer, b, 2)
    assert balancer.pick("small") is None
    assert not balancer.has_healthy()
    assert ("small", "small-0", "open") in balancer.breaker_states()
    clock.now += 10
    assert balancer.has_healthy()  # both half-open
    assert balancer.breaker_states() == [("small", "small-0", "half_open"), ("small", "small-1", "half_open")]
    first = balancer.pick("small")
    second = balancer.pick("small")
    assert first is not None and second is not None and first is not second
    assert balancer.pick("small") is None  # one trial each, both in flight
    balancer.record_success(first)
    assert first.breaker.state == "closed" and first.num_successes == 1
    assert balancer.pick("small") is first
    assert changes[:2] == [("small-0", "closed", "open"), ("small-1", "closed", "open")]


def test_pick_excludes_replicas_already_tried() -> None:
    balancer = Balancer(routing=routing())
    balancer.update(policy(small=3))
    a, b, c = balancer.replicas("small")
    assert balancer.pick("small", (a, b)) is c
    assert balancer.pick("small", (a, b, c)) is None
    assert balancer.pick("unknown") is None


def test_prefer_takes_the_affinity_replica_when_usable() -> None:
    balancer = Balancer(routing=routing())
    balancer.update(policy(small=3))
    a, b, c = balancer.replicas("small")
    b.outstanding = 50
    assert balancer.pick("small", prefer="small-1") is b
    assert balancer.pick("small", (b,), prefer="small-1") in (a, c)
    assert balancer.pick("small", prefer="elsewhere") in (a, c)
    fail(balancer, b, 2)
    assert balancer.pick("small", prefer="small-1") in (a, c)
    assert [s.label for s in balancer.candidates("small")] == ["small-0", "small-2"]
    assert balancer.load(a) == 0.0 and balancer.load(b) == 50.0


def test_each_pool_has_its_own_strategy() -> None:
    config = routing(rr=PoolRouting(strategy="round_robin"), lo=PoolRouting(strategy="least_outstanding"))
    balancer = Balancer(routing=config)
    balancer.update(policy(rr=2, lo=2))
    rr = [balancer.pick("rr") for _ in range(4)]
    assert [s.label for s in rr if s] == ["rr-0", "rr-1", "rr-0", "rr-1"]
    lo0, lo1 = balancer.replicas("lo")
    lo0.outstanding = 3
    assert {balancer.pick("lo") for _ in range(4)} == {lo1}


def test_a_reload_that_keeps_the_strategy_keeps_its_cursor() -> None:
    config = routing(rr=PoolRouting(strategy="round_robin"))
    balancer = Balancer(routing=config)
    balancer.update(policy(rr=3))
    assert [balancer.pick("rr").label for _ in range(2)] == ["rr-0", "rr-1"]  # type: ignore[union-attr]
    balancer.update(policy(rr=3))
    assert balancer.pick("rr").label == "rr-2"  # type: ignore[union-attr]


def test_saturation_and_fallback_order() -> None:
    config = routing(
        large=PoolRouting(fallbacks=("medium",), max_outstanding_per_replica=2),
        medium=PoolRouting(fallbacks=("small",), max_outstanding_per_replica=2),
    )
    balancer = Balancer(routing=config)
    balancer.update(policy(large=1, medium=1, small=1))
    order = balancer.pool_order("large")
    assert order == ("large", "medium", "small")
    (large,), (medium,), (small,) = (balancer.replicas(p) for p in order)

    assert balancer.pick_first(order) is large
    large.outstanding = 2
    assert balancer.is_saturated("large") and not balancer.is_saturated("small")
    assert balancer.pick("large") is large  # a plain pick ignores saturation
    assert balancer.pick_first(order) is medium
    medium.outstanding = 2
    assert balancer.pick_first(order) is small
    fail(balancer, small, 2)
    assert balancer.pick_first(order) is large  # every pool saturated or down: the first that can
    fail(balancer, large, 2)
    assert balancer.pick_first(order) is medium
    fail(balancer, medium, 2)
    assert balancer.pick_first(order) is None
    assert balancer.pool_order("unknown") == ("unknown",)


def test_free_slots_usable_replicas_and_a_pick_that_never_overloads() -> None:
    config = routing(
        large=PoolRouting(fallbacks=("small",), max_outstanding_per_replica=2),
        small=PoolRouting(max_outstanding_per_replica=1),
    )
    balancer = Balancer(routing=config)
    balancer.update(policy(large=2, small=1, open=1))
    order = balancer.pool_order("large")
    large0, large1 = balancer.replicas("large")
    (small,) = balancer.replicas("small")
    assert balancer.num_free_slots(order) == 5
    large0.outstanding, large1.outstanding, small.outstanding = 2, 3, 1
    assert balancer.num_free_slots(order) == 0
    assert balancer.pick_first(order, saturated_ok=False) is None  # a queued pool waits instead
    assert balancer.pick_first(order) is large0  # without a queue the first busy replica serves
    large1.outstanding = 1
    assert balancer.num_free_slots(order) == 1
    assert balancer.pick_first(order, saturated_ok=False) is large1
    fail(balancer, large1, 2)
    assert balancer.num_free_slots(order) == 0 and balancer.has_usable(order)
    fail(balancer, large0, 2)
    fail(balancer, small, 2)
    assert not balancer.has_usable(order)
    assert balancer.num_free_slots(["open"]) is None  # no cap: never saturated
    assert balancer.num_free_slots(["unknown"]) == 0


def test_release_frees_the_slot_and_tells_the_listeners() -> None:
    balancer = Balancer(routing=routing())
    balancer.update(policy(small=1))
    (state,) = balancer.replicas("small")
    heard: list[tuple[str, int]] = []
    balancer.add_release_listener(lambda s: heard.append((s.label, s.outstanding)))
    state.acquire()
    state.acquire()
    balancer.release(state)
    assert heard == [("small-0", 1)] and state.outstanding == 1 and state.num_requests == 2


def test_pick_first_skips_a_down_pool_and_prefers_only_in_the_first() -> None:
    config = routing(large=PoolRouting(fallbacks=("small",)))
    balancer = Balancer(routing=config)
    balancer.update(policy(large=2, small=2))
    order = balancer.pool_order("large")
    for state in balancer.replicas("large"):
        fail(balancer, state, 2)
    picked = balancer.pick_first(order, prefer="small-1")
    assert picked is not None and picked.pool == "small"
    tried = balancer.replicas("small")[:1]
    assert balancer.pick_first(order, tried) is balancer.replicas("small")[1]


def test_pool_order_is_breadth_first_and_each_pool_once() -> None:
    config = RoutingConfig(
        pools={
            "xl": PoolRouting(fallbacks=("large", "medium")),
            "large": PoolRouting(fallbacks=("small", "medium")),
            "medium": PoolRouting(fallbacks=("tiny",)),
        }
    )
    assert pool_order(config, "xl") == ("xl", "large", "medium", "small", "tiny")
    assert pool_order(config, "tiny") == ("tiny",)
    assert pool_order(SimpleNamespace(routing=config), "medium") == ("medium", "tiny")
    assert pool_order(SimpleNamespace(), "large") == ("large",)  # a policy without a routing section


def test_fallback_problems_name_the_path() -> None:
    pools = {"large": 1, "medium": 1, "small": 1}
    config = RoutingConfig(
        pools={
            "large": PoolRouting(fallbacks=("medium", "xl", "medium")),
            "medium": PoolRouting(fallbacks=("small", "large")),
            "small": PoolRouting(fallbacks=("small",)),
        }
    )
    problems = fallback_problems(config, pools)
    assert "routing.pools.large.fallbacks[1]: unknown pool 'xl' (pools are large, medium, small)" in problems
    assert "routing.pools.large.fallbacks[2]: 'medium' is listed twice" in problems
    assert "routing.pools.small.fallbacks[0]: a pool cannot fall back to itself" in problems
    assert "routing.pools.medium.fallbacks[1]: cycle large -> medium -> large" in problems
    assert fallback_problems(RoutingConfig(pools={"large": PoolRouting(fallbacks=("small",))}), pools) == []


def test_check_routing_names_unknown_pools_replicas_and_bad_paths() -> None:
    pools = policy(small=1).pools
    config = RoutingConfig(
        health=HealthConfig(path="health"),
        pools={
            "big": PoolRouting(),
            "small": PoolRouting(health_urls={"small-9": "http://x/h", "small-0": "ftp://x"}),
        },
    )
    problems = check_routing(config, pools)
    assert problems == [
        "routing.pools.big: unknown pool (pools are small)",
        "routing.pools.small.health_urls.small-9: unknown replica (labels are small-0)",
        "routing.pools.small.health_urls.small-0: expected an http(s) URL, got 'ftp://x'",
        "routing.health.path: expected a path starting with '/'",
    ]
    assert check_routing(RoutingConfig(), pools) == []
    queued = RoutingConfig(pools={"small": PoolRouting(queue=QueueConfig())})
    assert check_routing(queued, pools) == [
        "routing.pools.small.queue: needs max_outstanding_per_replica (the cap it waits on)"
    ]


def test_convert_routing_validates_and_names_the_path() -> None:
    config = convert_routing({"pools": {"large": {"fallbacks": ["medium"], "breaker": {"open_s": 3}}}})
    assert config.for_pool("large").fallbacks == ("medium",)
    assert config.breaker_of("large").open_s == 3 and config.breaker_of("small").open_s == 10
    assert convert_routing(None) == RoutingConfig()
    with pytest.raises(ValueError, match=r"^routing\.pools\.large\.breaker\.open_s: expected `float` > 0"):
        convert_routing({"pools": {"large": {"breaker": {"open_s": 0}}}})
    with pytest.raises(ValueError, match=r"^routing\.balancer\.strategy: invalid enum value 'random'"):
        convert_routing({"balancer": {"strategy": "random"}})
    with pytest.raises(ValueError, match=r"^routing\.pools\.small: object contains unknown field `fallback`"):
        convert_routing({"pools": {"small": {"fallback": ["x"]}}})
    with pytest.raises(ValueError, match=r"^routing: expected `object`"):
        convert_routing([1])
    queue = convert_routing({"pools": {"large": {"queue": {"max_wait_s": 2}}}}).for_pool("large").queue
    assert queue == QueueConfig(max_wait_s=2, max_queued_per_tenant=100)
    with pytest.raises(ValueError, match=r"^routing\.pools\.large\.queue\.max_queued_per_tenant: expected"):
        convert_routing({"pools": {"large": {"queue": {"max_queued_per_tenant": 0}}}})


def test_config_structs_are_frozen_and_documented() -> None:
    for struct in (BalancerConfig, BreakerConfig, HealthConfig, PoolRouting, QueueConfig, RoutingConfig):
        assert struct.__struct_config__.frozen and struct.__struct_config__.forbid_unknown_fields
        assert struct.__doc__
    with pytest.raises(AttributeError):
        RoutingConfig().balancer = BalancerConfig()  # type: ignore[misc]
    assert msgspec.json.decode(msgspec.json.encode(RoutingConfig()), type=RoutingConfig) == RoutingConfig()


def test_pick_is_cheap() -> None:
    balancer = Balancer(routing=routing())
    balancer.update(policy(small=8))
    states = balancer.replicas("small")
    for i, state in enumerate(states):
        state.outstanding = i % 3
    n = 50_000
    started = time.perf_counter()
    for _ in range(n):
        balancer.pick("small")
    per_pick_us = (time.perf_counter() - started) / n * 1e6
    print(f"pick over 8 replicas: {per_pick_us:.2f} us")
    assert per_pick_us < 50  # ~3-5 us here; generous for a busy CI machine


def test_the_docs_policy_example_loads() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "replicas.md").read_text()
    block = page.split("\n## Policy\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = convert_routing(yaml.safe_load(block)["routing"])
    pools = {
        name: SimpleNamespace(replicas=[SimpleNamespace(label=label)])
        for name, label in [("large", "l"), ("medium", "m"), ("small", "gpu-3"), ("openai", "o")]
    }
    assert check_routing(config, pools) == []
    assert pool_order(config, "large") == ("large", "medium", "small")
    assert config.strategy_of("large") == "load_aware" and config.health_of("openai").probe_interval_s == 0
    assert config.for_pool("large").queue == QueueConfig(max_wait_s=10, max_queued_per_tenant=50)


def test_requests_count_every_gateways_while_a_scrape_is_fresh_and_no_kv_cache_use() -> None:
    clock = Clock()
    balancer = Balancer(clock=clock)
    balancer.update(policy(small=1))
    (state,) = balancer.replicas("small")
    state.outstanding = 2
    state.num_running, state.num_waiting, state.kv_cache_usage = 5.0, 1.0, 0.9
    assert balancer.requests(state) == 2.0  # never scraped: only our own
    state.outstanding_at_scrape, state.load_fresh_until = 2, clock.now + 1
    assert balancer.requests(state) == 6.0  # it runs 5 (our 2 among them) and queues 1
    state.outstanding = 7  # ours sent since the scrape, beside the others' 3
    assert balancer.requests(state) == 11.0
    state.outstanding = 0  # ours ended since the scrape: they stop counting before the next one
    assert balancer.requests(state) == 4.0
    clock.now += 2
    assert balancer.requests(state) == 0.0  # stale again: only our own
