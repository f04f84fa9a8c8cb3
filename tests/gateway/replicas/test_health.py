"""Active probes and load scrapes, against real replica servers on loopback (and an in-memory client)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from gateway.policy import Policy, parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.client import UpstreamResponse
from gateway.replicas.config import BalancerConfig, BreakerConfig, HealthConfig, RoutingConfig
from gateway.replicas.health import HealthChecker, ReplicaLoad, parse_vllm_metrics
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.pools import Timeouts
from tools.servers.redis_server import free_port

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


class ReplicaServer:
    """A tiny replica on a fixed loopback port: /health, /metrics (vLLM names), /v1/chat/completions."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.health_status = 200
        self.health_delay_s = 0.0
        self.metrics_page = b""
        self.num_health = 0
        self.num_completions = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _health(self, request: web.Request) -> web.Response:
        self.num_health += 1
        if self.health_delay_s:
            await asyncio.sleep(self.health_delay_s)
        return web.json_response({}, status=self.health_status)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics_page, content_type="text/plain")

    async def _chat(self, request: web.Request) -> web.Response:
        self.num_completions += 1
        await request.read()
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def policy_for(*servers: ReplicaServer) -> Policy:
    replicas = [{"base_url": s.base_url, "model": "m", "name": f"r{i}"} for i, s in enumerate(servers)]
    return parse_policy({"pools": {"small": {"replicas": replicas}}}, "test.yaml")


def routing(**health: Any) -> RoutingConfig:
    return RoutingConfig(
        breaker=BreakerConfig(failure_threshold=3, open_s=30),  # long: only probes can close it in time
        health=HealthConfig(**{"probe_interval_s": 0.05, "probe_timeout_s": 0.5, **health}),
    )


async def wait_for(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


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


class FakeClient:
    """An in-memory UpstreamClient whose GET answers are scripted per URL."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.urls: list[str] = []

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        self.urls.append(url)
        answer = self.answers.get(url, 200)
        if isinstance(answer, Exception):
            raise answer
        if answer == "hang":
            await asyncio.sleep(60)
        return (answer, b"") if isinstance(answer, int) else answer

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        what: str,
        *,
        headers_s: float | None = None,
    ) -> UpstreamResponse:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def one_replica(config: RoutingConfig) -> tuple[Balancer, ReplicaState]:
    balancer = Balancer(routing=config)
    balancer.update(
        parse_policy({"pools": {"p": {"replicas": [{"base_url": "http://h:8/v1", "model": "m"}]}}}, "t")
    )
    (state,) = balancer.replicas("p")
    return balancer, state


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
