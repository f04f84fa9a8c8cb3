"""Regions across hosts: a gateway in ``eu`` with one replica in ``eu`` and one in ``us``, each on a host
(network namespace) of its own behind a link whose delay the test sets (tests/support/delay_relay.py:
this VM's kernel has no ``sch_netem``, so the delay is a relay in the replica's namespace in front of
it; every round trip to that host, health probes included, grows by twice it). This process is the
client, from the bridge, and the gateway's trusted proxy.

1. Healthy: requests are served in ``eu`` (home), and a client whose trusted header says ``us`` in ``us``.
2. ``eu``'s link slows to 150 ms each way: once the health probes have measured it (a 300 ms round trip
   against a 100 ms budget), requests spill to ``us``: ``x-sortyard-region-spill: eu -> us: over_budget``.
3. The link heals: requests come home to ``eu``.
4. ``eu``'s host goes down: they spill to ``us`` as ``unhealthy`` (a request caught by the death is
   retried there); the metrics counted every spill.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.netns import Network, unavailable_reason
from tests.support.netns_cluster import REPO, _environ, wait_for
from tools.servers.gateway_server import write_policy

pytestmark = pytest.mark.slow

HOSTS = ("gw", "eu", "us")
LINK_PORT, ENGINE_PORT, GATEWAY_PORT = 8000, 8001, 8080
BODY = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Regions:
    net: Network
    gateway: str
    delays: dict[str, Path]
    engines: dict[str, Any]
    logs: dict[str, Path]

    def ask(self, headers: dict[str, str] | None = None) -> httpx.Response:
        response = httpx.post(f"{self.gateway}/v1/chat/completions", json=BODY, headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        return response

    def served_in(self, region: str, spill: str | None = None) -> bool:
        response = self.ask()
        return response.headers.get("x-sortyard-region") == region and (
            response.headers.get("x-sortyard-region-spill") == spill
        )


def policy(path: Path, net: Network) -> Path:
    replicas = [
        {"base_url": f"http://{net.address(r)}:{LINK_PORT}/v1", "model": "echo", "name": r, "region": r}
        for r in ("eu", "us")
    ]
    return write_policy(
        path,
        {
            "version": 1,
            "pools": {"chat": {"replicas": replicas}},
            "auth": {"required": False},
            "limits": {"unauthenticated": {"trusted_proxies": [f"{net.root_address}/32"]}},
            "timeouts": {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 10},
            "retry": {"max_attempts": 2},  # a request caught by eu's death is retried (in us)
            "cache": {"response": {"enabled": False}, "affinity": {"enabled": False}},
            "telemetry": {"access_log": False},
            "routing": {
                "health": {"probe_interval_s": 0.1, "probe_timeout_s": 1.0, "unhealthy_threshold": 1},
                "regions": {
                    "local": "eu",
                    "client_header": "x-client-region",
                    "latency_ms": {"eu": {"us": 40}},
                    "max_latency_ms": 100,
                },
            },
        },
    )


@pytest.fixture
def regions(tmp_path: Path) -> Iterator[Regions]:
    reason = unavailable_reason(partitions=False)
    if reason is not None:
        pytest.skip(reason)
    with Network(list(HOSTS)) as net:
        logs = {name: tmp_path / f"{name}.log" for name in ("gw", "eu", "eu-link", "us", "us-link")}
        delays = {region: tmp_path / f"{region}.delay" for region in ("eu", "us")}

        def start(host: str, log: str, argv: list[str]) -> Any:
            with logs[log].open("wb") as out:
                return net.popen(host, argv, env=_environ(), cwd=REPO, stdout=out, stderr=out)

        engines = {}
        for region in ("eu", "us"):
            delays[region].write_text("")
            code = "from tests.support.netns_cluster import engine_main; "
            code += f"engine_main('127.0.0.1', {ENGINE_PORT})"
            engine = start(region, region, [sys.executable, "-c", code])
            relay = [sys.executable, "-m", "tests.support.delay_relay", net.address(region), str(LINK_PORT)]
            engines[region] = (
                engine,
                start(region, f"{region}-link", [*relay, str(ENGINE_PORT), str(delays[region])]),
            )
        path = policy(tmp_path / "policy.yaml", net)
        start(
            "gw",
            "gw",
            [sys.executable, "-m", "gateway", "serve", "--policy", str(path),
             "--host", net.address("gw"), "--port", str(GATEWAY_PORT), "--log-level", "warning"],
        )  # fmt: skip
        made = Regions(net, f"http://{net.address('gw')}:{GATEWAY_PORT}", delays, engines, logs)
        try:
            for region in ("eu", "us"):
                url = f"http://{net.address(region)}:{LINK_PORT}/health"
                wait_for(lambda url=url: _answers(url), f"{region} answered", 60)  # type: ignore[misc]
            wait_for(lambda: _answers(made.gateway + "/readyz"), "the gateway ready", 60)
            yield made
        except BaseException:
            print("\n".join(f"--- {n}:\n{p.read_text()[-2000:]}" for n, p in logs.items() if p.exists()))
            raise


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def spills(gateway: str, reason: str) -> float:
    text = httpx.get(f"{gateway}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("sortyard_region_picks_total{") and f'reason="{reason}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_pool_serves_near_spills_when_home_is_slow_or_down_and_comes_back(regions: Regions) -> None:
    assert regions.served_in("eu")
    trusted = regions.ask({"x-client-region": "us"})
    assert trusted.headers["x-sortyard-region"] == "us"  # the edge proxy's word for where the client is

    regions.delays["eu"].write_text("150")  # eu's link: 300 ms round trips from now on
    wait_for(lambda: regions.served_in("us", "eu -> us: over_budget"), "a spill over the budget", 30, 0.1)

    regions.delays["eu"].write_text("")
    wait_for(lambda: regions.served_in("eu"), "home again once eu's link healed", 30, 0.1)

    for process in regions.engines["eu"]:  # the host goes down: its replica and its link
        process.terminate()
    wait_for(
        lambda: regions.served_in("us", "eu -> us: unhealthy"), "a spill away from a dead region", 30, 0.1
    )
    assert spills(regions.gateway, "over_budget") >= 1 and spills(regions.gateway, "unhealthy") >= 1
    assert spills(regions.gateway, "nearest") >= 2
