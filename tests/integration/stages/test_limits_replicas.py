"""Limits stay exact across gateway replicas sharing one Redis; Redis failures behave as the policy says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_process import GatewayProcess
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy
from tools.servers.redis_server import RedisServer

pytestmark = pytest.mark.slow

KEY = new_key()
ADMIN = new_key()
BODY = {"model": "small", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def _policy(tmp_path: Path, upstream: FakeUpstream, limits: dict[str, Any], **store: Any) -> Path:
    document = fake_policy(upstream.base_url)
    document["auth"] = {"required": True}
    # a generous store timeout: on a busy 2-core CI box a spurious timeout would fail open to the
    # local limiter, which is exactly the drift this test must not see
    document["store"] = {"url_env": "SORTYARD_REDIS_URL", "timeout_s": 2.0, **store}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "k", "limits": limits},
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    return write_policy(tmp_path / "policy.yaml", document)


async def _fire(urls: list[str], total: int, concurrency: int) -> list[int]:
    statuses: list[int] = []
    counter = iter(range(total))
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as http:

        async def worker() -> None:
            for i in counter:
                response = await http.post(
                    urls[i % len(urls)] + "/v1/chat/completions", json=BODY, headers=headers
                )
                statuses.append(response.status_code)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def _replicas(policy: Path, redis_url: str) -> list[GatewayProcess]:
    procs = [GatewayProcess(policy, env={"SORTYARD_REDIS_URL": redis_url}) for _ in range(3)]
    return [p.wait_ready() for p in procs]


def test_three_replicas_admit_exactly_the_rpm_limit(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str
) -> None:
    procs = _replicas(_policy(tmp_path, upstream, {"requests_per_minute": 300}), redis_flushed)
    try:
        statuses = asyncio.run(_fire([p.url for p in procs], 2000, 64))
    finally:
        for p in procs:
            p.stop()
    assert len(statuses) == 2000
    assert statuses.count(200) == 300
    assert statuses.count(429) == 1700


def test_three_replicas_never_exceed_the_tpm_limit_and_the_ledger_is_exact(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str
) -> None:
    # each request reserves ~8 prompt tokens + 20 and settles to the fake's 11 + 6 = 17
    limit = 3000
    procs = _replicas(_policy(tmp_path, upstream, {"tokens_per_minute": limit}), redis_flushed)
    try:
        statuses = asyncio.run(_fire([p.url for p in procs], 600, 64))
        usage = httpx.get(procs[0].url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    finally:
        for p in procs:
            p.stop()
    admitted = statuses.count(200)
    assert statuses.count(200) + statuses.count(429) == 600
    assert admitted * 17 <= limit
    assert admitted >= limit // 28  # reservations alone never block more than they should
    ledger = usage["tenants"]["acme"]["keys"]["k"]
    assert ledger == {
        "requests": admitted,
        "input_tokens": 11 * admitted,
        "output_tokens": 6 * admitted,
        "cost_usd": 0.0,
    }


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
def test_redis_stopped_and_restarted(
    tmp_path: Path, upstream: FakeUpstream, own_redis: RedisServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SORTYARD_REDIS_URL", own_redis.url)
    policy = _policy(tmp_path, upstream, {"requests_per_minute": 10_000}, on_failure=mode, timeout_s=0.1)
    gateway = GatewayServer(policy).start()
    headers = {"Authorization": f"Bearer {KEY}"}

    def call() -> tuple[int, float, httpx.Response]:
        started = time.monotonic()
        response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, headers=headers, timeout=10)
        return response.status_code, time.monotonic() - started, response

    try:
        assert call()[0] == 200
        own_redis.stop()

        def store_failure_seen() -> bool:
            # credit taken in Redis before it stopped admits requests locally until it runs out; the
            # first request that needs the store shows up as a fallback (open) or a 503 (closed)
            status = call()[0]
            if mode == "fail_closed":
                return status == 503
            return "sortyard_store_fallbacks_total{" in httpx.get(gateway.url + "/metrics").text

        deadline = time.monotonic() + 30
        while not store_failure_seen():
            assert time.monotonic() < deadline, "the gateway never noticed the store had gone"
        during = [call() for _ in range(20)]
        # the store's timeout is 0.1 s: a request that waited on a dead store would hit the client's 10 s
        # timeout; the bound only catches that, and stays far from what a busy CI machine takes
        assert max(elapsed for _, elapsed, _ in during) < 5.0
        if mode == "fail_open":
            assert all(status == 200 for status, _, _ in during)
            metrics = httpx.get(gateway.url + "/metrics").text
            assert "sortyard_store_fallbacks_total" in metrics
        else:
            assert all(status == 503 for status, _, _ in during)
            response = during[0][2]
            assert response.headers["retry-after"] and response.json()["error"]["code"] == "store_unavailable"
        own_redis.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and call()[0] != 200:
            time.sleep(0.2)
        after = [call()[0] for _ in range(5)]
        assert after == [200] * 5  # recovered with no restart
    finally:
        gateway.stop()
