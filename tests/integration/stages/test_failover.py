"""Three replicas, one killed under load: no request fails, its breaker opens, and closes when it returns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow
ASK = {"model": "trio", "messages": [{"role": "user", "content": "hi"}]}


def _breaker(gateway: GatewayServer, label: str) -> str:
    states = {replica: state for _pool, replica, state in gateway.gateway.balancer.breaker_states()}
    return states[label]


def test_one_replica_killed_under_load(tmp_path: Path) -> None:
    replicas = [FakeUpstream().start() for _ in range(3)]
    document = fake_policy(replicas[0].base_url)
    document["pools"]["trio"] = {"replicas": [{"base_url": r.base_url, "model": "echo"} for r in replicas]}
    document["retry"] = {"max_attempts": 3, "backoff_s": 0.005}
    document["routing"] = {
        "breaker": {"failure_threshold": 3, "open_s": 30},
        "health": {"probe_interval_s": 0.2, "probe_timeout_s": 0.5},
    }
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", document)).start()
    victim = replicas[1]
    label = f"127.0.0.1:{victim.port}"
    statuses: list[int] = []

    async def load(seconds: float) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            deadline = time.monotonic() + seconds

            async def worker() -> None:
                while time.monotonic() < deadline:
                    response = await http.post(gateway.url + "/v1/chat/completions", json=ASK)
                    statuses.append(response.status_code)

            await asyncio.gather(*(worker() for _ in range(8)))

    try:
        asyncio.run(load(0.5))
        victim.stop()  # killed mid-run: the next connects are refused
        asyncio.run(load(1.5))
        assert statuses and all(status == 200 for status in statuses), set(statuses)
        assert _breaker(gateway, label) == "open"
        replicas[1] = FakeUpstream(port=victim.port).start()  # it comes back on the same port
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _breaker(gateway, label) != "closed":
            asyncio.run(load(0.2))
        assert _breaker(gateway, label) == "closed"
        before = len(replicas[1].requests)
        asyncio.run(load(0.5))
        assert len(replicas[1].requests) > before  # it serves again
        assert all(status == 200 for status in statuses)
    finally:
        gateway.stop()
        for replica in replicas:
            replica.stop()
