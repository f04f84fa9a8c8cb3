"""Load scrapes: vLLM's metrics page parsed, and the scraped load feeding ``load_aware`` and the KV pick,
against a real replica server on loopback (and an in-memory client)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.errors import UpstreamConnectError
from gateway.replicas.balancer import Balancer
from gateway.replicas.config import BalancerConfig, HealthConfig, RoutingConfig
from gateway.replicas.health import HealthChecker, ReplicaLoad, parse_vllm_metrics
from gateway.replicas.http1 import Http1UpstreamClient
from tests.gateway.replicas.health_support import FakeClient, ReplicaServer, one_replica, policy_for, wait_for

VLLM_PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0 1700000000000
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="a b}c"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:num_requests_waiting_by_reason{reason="x"} 99
vllm:prompt_tokens_total{model_name="m"} 12345.0
process_cpu_seconds_total 3.5
"""


@pytest.fixture
async def client() -> Any:
    client = Http1UpstreamClient()
    yield client
    await client.close()


def test_parse_vllm_metrics_sums_engines_and_takes_the_fullest_kv_cache() -> None:
    assert parse_vllm_metrics(VLLM_PAGE) == ReplicaLoad(num_waiting=8.0, num_running=6.0, kv_cache_usage=0.75)


def test_parse_vllm_metrics_reads_old_names_and_bare_lines_and_refuses_other_pages() -> None:
    page = b"vllm:gpu_cache_usage_perc 0.5\nvllm:num_requests_waiting 2\nvllm:num_requests_running NaN\n"
    assert parse_vllm_metrics(page) == ReplicaLoad(2.0, 0.0, 0.5)
    assert parse_vllm_metrics(b"vllm:kv_cache_usage_perc 7\n") == ReplicaLoad(0.0, 0.0, 1.0)  # clamped
    assert parse_vllm_metrics(b"# nothing\nprocess_cpu_seconds_total 1\nvllm:broken\n") is None
    assert parse_vllm_metrics(b'vllm:num_requests_waiting{x="1"} oops\n') is None
    assert parse_vllm_metrics(b"") is None


async def test_scrapes_feed_load_aware_choice(client: Http1UpstreamClient) -> None:
    busy, idle = ReplicaServer(), ReplicaServer()
    busy.metrics_page = VLLM_PAGE
    idle.metrics_page = b"vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1\n"
    for server in (busy, idle):
        await server.start()
    config = RoutingConfig(
        balancer=BalancerConfig(strategy="load_aware"),
        health=HealthConfig(probe_interval_s=0, scrape_interval_s=0.05),
    )
    balancer = Balancer(routing=config)
    balancer.update(policy_for(busy, idle))
    busy_state, idle_state = balancer.replicas("small")
    checker = HealthChecker(balancer, client, max_tick_s=0.02)
    checker.start()
    try:
        await wait_for(lambda: busy_state.num_waiting == 8.0 and idle_state.kv_cache_usage == 0.1)
        assert busy_state.num_running == 6.0 and busy_state.kv_cache_usage == 0.75
        # its 6 running (every gateway's), 8 waiting and 75% of its KV cache in use
        assert balancer.load(busy_state) == pytest.approx(6.0 + 8.0 + 4 * 0.75)
        assert {balancer.pick("small") for _ in range(10)} == {idle_state}
        idle_state.outstanding = 20  # our own in-flight requests outweigh the scraped load
        assert balancer.pick("small") is busy_state
    finally:
        await checker.stop()
        for server in (busy, idle):
            await server.stop()


async def test_a_failed_scrape_leaves_the_load_to_go_stale() -> None:
    balancer, state = one_replica(RoutingConfig(balancer=BalancerConfig(strategy="load_aware")))
    client = FakeClient()
    checker = HealthChecker(balancer, client)
    client.answers[state.metrics_url] = (200, b"vllm:num_requests_waiting 5\n")
    before = time.monotonic()
    assert await checker.scrape(state)
    assert state.num_waiting == 5.0
    assert before + 3 * 2.0 <= state.load_fresh_until <= time.monotonic() + 3 * 2.0
    for answer in ((200, b"not metrics"), (500, b""), UpstreamConnectError("refused")):
        client.answers[state.metrics_url] = answer
        assert not await checker.scrape(state)
    assert checker.num_scrapes == 4 and checker.num_scrape_failures == 3
    assert state.num_waiting == 5.0  # kept, but it stops counting at load_fresh_until


async def test_a_scrape_keeps_our_share_of_the_running_count_as_of_its_ask() -> None:
    balancer, state = one_replica(RoutingConfig(balancer=BalancerConfig(strategy="load_aware")))
    client = FakeClient()
    checker = HealthChecker(balancer, client)
    page = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
    client.answers[state.metrics_url] = (200, page)
    state.outstanding = 2
    asked = asyncio.Event()
    real_get = client.get

    async def get_while_ours_ends(url: str, timeout_s: float) -> tuple[int, bytes]:
        state.outstanding -= 1  # one of ours ends while the page is on its way: the page still ran it
        asked.set()
        return await real_get(url, timeout_s)

    client.get = get_while_ours_ends  # type: ignore[method-assign]
    assert await checker.scrape(state) and asked.is_set()
    assert state.outstanding_at_scrape == 2 and state.others_running() == 1.0
    assert balancer.requests(state) == 2.0  # our 1 left, live, and the other gateways' 1
