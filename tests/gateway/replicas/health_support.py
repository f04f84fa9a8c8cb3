"""Replica fakes for the health checker's tests: a tiny real replica server on loopback, an in-memory
client whose GET answers are scripted, and the balancer and policy helpers around them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from gateway.policy import Policy, parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.client import UpstreamResponse
from gateway.replicas.config import BreakerConfig, HealthConfig, RoutingConfig
from gateway.replicas.pools import Timeouts
from tools.servers.redis_server import free_port


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
