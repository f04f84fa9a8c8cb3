"""gateway/telemetry/metrics.py: /metrics parses with prometheus-client's parser and Prometheus scrapes
it; tenants label tokens only when the policy allows (across worker processes: test_multiprocess.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.metrics import Metrics
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy
from tools.servers.redis_server import free_port

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Path:
    return write_policy(tmp_path_factory.mktemp("metrics") / "policy.yaml", fake_policy(upstream.base_url))


def samples(text: str) -> dict[str, float]:
    """Sample name + sorted labels -> value, summed over any pid label."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "pid")
            key = f"{sample.name}{{{labels}}}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def requests_total(text: str, pool: str) -> float:
    return sum(
        v
        for k, v in samples(text).items()
        if k.startswith("sortyard_requests_total{") and f"pool={pool}" in k
    )


def test_single_process_metrics_parse(policy_path: Path) -> None:
    server = GatewayServer(policy_path).start()
    try:
        for body in (CHAT, {**CHAT, "stream": True}):
            assert httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
        server.settle()  # requests are counted by their finishers, after the response
        text = httpx.get(server.url + "/metrics", timeout=5).text
    finally:
        server.stop()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {
        "sortyard_requests",
        "sortyard_time_to_first_token_seconds",
        "sortyard_time_per_output_token_seconds",
        "sortyard_gateway_overhead_seconds",
        "sortyard_tokens",
        "sortyard_replica_outstanding_requests",
        "sortyard_replica_breaker_state",
    } <= names
    assert requests_total(text, "small") == 2
    assert samples(text)["sortyard_time_per_output_token_seconds_count{pool=small}"] == 1


def test_tenant_labels_only_when_allowed() -> None:
    from gateway.compiled import compile_policy
    from gateway.pipeline import Call, Endpoint, Usage
    from gateway.policy import parse_policy

    replica = {"base_url": "http://h/v1", "model": "m"}
    policy = parse_policy({"pools": {"small": {"replicas": [replica]}}}, "p")

    def finished_call(**env: str) -> Call:
        compiled = compile_policy(policy, env)
        call = Call(Endpoint.CHAT, {}, {}, compiled, "r1", "m", tenant="acme")
        call.pool, call.usage = "small", Usage(3, 4)
        return call

    metrics = Metrics()
    metrics.record_call(finished_call(), None)
    assert b"sortyard_tenant_tokens_total{" not in metrics.render()
    metrics = Metrics()
    metrics.record_call(finished_call(SORTYARD_TENANT_LABELS="1"), None)
    assert (
        b'sortyard_tenant_tokens_total{direction="output",pool="small",tenant="acme"} 4.0' in metrics.render()
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus package is not installed")
def test_a_real_prometheus_scrapes_the_gateway(policy_path: Path, tmp_path: Path) -> None:
    server = GatewayServer(policy_path).start()
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: sortyard\n    static_configs: [{{targets: ['127.0.0.1:{server.port}']}}]\n"
    )
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=10).status_code == 200
        deadline = time.monotonic() + 45
        query = f"http://127.0.0.1:{prom_port}/api/v1/query"
        while True:
            try:
                body = httpx.get(query, params={"query": "sortyard_requests_total"}, timeout=2).json()
                if body["data"]["result"]:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, "Prometheus never scraped the gateway"
            time.sleep(0.5)
        targets = httpx.get(f"http://127.0.0.1:{prom_port}/api/v1/targets", timeout=2).json()
        assert targets["data"]["activeTargets"][0]["health"] == "up"
    finally:
        prom.terminate()
        prom.wait(15)
        server.stop()
