"""Active probes, against real replica servers on loopback (and an in-memory client); the load scrapes
are in ``test_health_scrapes.py``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.health import HealthChecker
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.pools import Timeouts
from tests.gateway.replicas.health_support import (
    FakeClient,
    ReplicaServer,
    one_replica,
    policy_for,
    routing,
    wait_for,
)


@pytest.fixture
async def client() -> Any:
    client = Http1UpstreamClient()
    yield client
    await client.close()


async def test_probe_thresholds_and_what_counts_as_up() -> None:
    balancer, state = one_replica(routing(unhealthy_threshold=2, healthy_threshold=2, probe_timeout_s=0.05))
    client = FakeClient()
    checker = HealthChecker(balancer, client)
    assert state.health_url == "http://h:8/health"
    for answer in (404, 401, 200):  # any answer below 500: the server is up
        client.answers[state.health_url] = answer
        assert await checker.probe(state)
    failures: tuple[object, ...] = (
        503,
        UpstreamConnectError("refused"),
        UpstreamTimeout("t"),
        UpstreamError("x"),
        "hang",
    )
    for failure in failures:
        client.answers[state.health_url] = failure
        assert not await checker.probe(state), failure
    assert checker.num_probe_failures == 5
    assert state.breaker.state == "open" and state.breaker.is_opened_by_probe
    assert balancer.pick("p") is None and not balancer.has_healthy()
    client.answers[state.health_url] = 200
    assert await checker.probe(state)
    assert state.breaker.state == "open"  # healthy_threshold=2
    assert await checker.probe(state)
    assert state.breaker.state == "closed" and balancer.pick("p") is state


async def test_one_failed_probe_below_the_threshold_changes_nothing() -> None:
    balancer, state = one_replica(routing(unhealthy_threshold=2))
    client = FakeClient()
    checker = HealthChecker(balancer, client)
    client.answers[state.health_url] = 500
    await checker.probe(state)
    client.answers[state.health_url] = 200
    await checker.probe(state)
    client.answers[state.health_url] = 500
    await checker.probe(state)
    assert state.breaker.state == "closed"


async def test_probes_are_off_when_the_interval_is_zero_and_stop_cancels_a_hung_probe() -> None:
    balancer, state = one_replica(routing(probe_interval_s=0))
    client = FakeClient()
    checker = HealthChecker(balancer, client, max_tick_s=0.01)
    checker.start()
    await asyncio.sleep(0.05)
    assert client.urls == []
    await checker.stop()

    balancer, state = one_replica(routing(probe_timeout_s=30))
    client.answers[state.health_url] = "hang"
    checker = HealthChecker(balancer, client, max_tick_s=0.01)
    checker.start()
    await wait_for(lambda: client.urls)
    async with asyncio.timeout(10):  # far less than the hung probe's 30 s timeout
        await checker.stop()
    assert state.breaker.state == "closed"


async def test_a_reload_adds_and_drops_probed_replicas() -> None:
    client = FakeClient()
    balancer = Balancer(routing=routing())
    balancer.update(
        parse_policy({"pools": {"p": {"replicas": [{"base_url": "http://a:1/v1", "model": "m"}]}}}, "t")
    )
    checker = HealthChecker(balancer, client, max_tick_s=0.01)
    checker.start()
    try:
        await wait_for(lambda: "http://a:1/health" in client.urls)
        balancer.update(
            parse_policy({"pools": {"p": {"replicas": [{"base_url": "http://b:1/v1", "model": "m"}]}}}, "t")
        )
        await wait_for(lambda: "http://b:1/health" in client.urls)
        client.urls.clear()  # from here on only b is probed
        await wait_for(lambda: len(client.urls) >= 3)
        assert set(client.urls) == {"http://b:1/health"}
    finally:
        await checker.stop()


async def test_real_replica_stopped_and_restarted_on_the_same_port(client: Http1UpstreamClient) -> None:
    server = ReplicaServer()
    await server.start()
    balancer = Balancer(routing=routing(unhealthy_threshold=1))
    balancer.update(policy_for(server))
    (state,) = balancer.replicas("small")
    checker = HealthChecker(balancer, client, max_tick_s=0.02)
    checker.start()
    try:
        await wait_for(lambda: server.num_health >= 2)
        assert state.breaker.state == "closed"
        await server.stop()
        await wait_for(lambda: state.breaker.state == "open")
        assert balancer.pick("small") is None and not balancer.has_healthy()
        await server.start()
        await wait_for(lambda: state.breaker.state == "closed")  # open_s is 30 s: the probe closed it
        assert balancer.pick("small") is state and balancer.has_healthy()
    finally:
        await checker.stop()
        await server.stop()


async def send(balancer: Balancer, client: Http1UpstreamClient, max_attempts: int = 3) -> list[ReplicaState]:
    """What the upstream stage does for a non-streaming call: pick, send, record, retry elsewhere."""
    tried: list[ReplicaState] = []
    for _ in range(max_attempts):
        state = balancer.pick("small", tuple(tried))
        assert state is not None, "no replica left"
        tried.append(state)
        state.acquire()
        try:
            response = await client.post(
                state.replica.base_url + "/chat/completions",
                b"{}",
                {},
                Timeouts(connect_s=0.5, total_s=2),
                "t",
            )
            await response.read()
            response.release()
        except (UpstreamError, UpstreamTimeout) as error:
            if isinstance(error, UpstreamError):  # a timed-out request is slow, not broken
                balancer.record_failure(state)
            continue
        finally:
            state.release()
        balancer.record_success(state)
        return tried
    raise AssertionError(f"request failed on {[s.label for s in tried]}")


@pytest.mark.slow
async def test_one_of_three_replicas_killed_under_load(client: Http1UpstreamClient) -> None:
    servers = [ReplicaServer() for _ in range(3)]
    for server in servers:
        await server.start()
    balancer = Balancer(routing=routing())
    balancer.update(policy_for(*servers))
    states = balancer.replicas("small")
    dead = states[1]
    checker = HealthChecker(balancer, client, max_tick_s=0.02)
    checker.start()
    picked_while_open = 0

    async def load(num_requests: int) -> None:
        nonlocal picked_while_open
        for _ in range(num_requests // 8):
            was_open = dead.breaker.state == "open"
            attempts = await asyncio.gather(*(send(balancer, client) for _ in range(8)))
            if was_open:
                picked_while_open += sum(dead in tried for tried in attempts)

    try:
        await load(48)
        assert all(s.num_successes > 0 for s in states)
        await servers[1].stop()
        await load(96)  # every request succeeds (retried elsewhere) while the breaker opens
        assert dead.breaker.state == "open"
        assert dead.num_failures >= 3
        assert picked_while_open == 0
        served = servers[1].num_completions
        await servers[1].start()
        deadline = time.monotonic() + 5.0
        while dead.breaker.state != "closed":  # a good probe, then a trial request, close it
            assert time.monotonic() < deadline, f"breaker still {dead.breaker.state}"
            await load(8)
            await asyncio.sleep(0.01)
        await load(48)
        assert servers[1].num_completions > served
    finally:
        await checker.stop()
        for server in servers:
            await server.stop()


async def test_connect_refused_opens_the_breaker_without_probes(client: Http1UpstreamClient) -> None:
    servers = [ReplicaServer() for _ in range(2)]
    for server in servers:
        await server.start()
    balancer = Balancer(routing=routing(probe_interval_s=0))
    balancer.update(policy_for(*servers))
    alive, dead = balancer.replicas("small")
    try:
        await servers[1].stop()
        attempts = [await send(balancer, client) for _ in range(10)]  # one at a time: exact counts
        assert dead.breaker.state == "open" and not dead.breaker.is_opened_by_probe
        assert dead.num_failures == 3  # failure_threshold; never picked again after that
        assert sum(dead in tried for tried in attempts) == 3
        assert all(tried[-1] is alive for tried in attempts)
        assert balancer.has_healthy()
    finally:
        for server in servers:
            await server.stop()
