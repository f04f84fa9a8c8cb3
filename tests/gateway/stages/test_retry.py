"""Retries before the first byte: on another replica, bounded by attempts and the deadline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.compiled import compile_policy
from gateway.errors import (
    GatewayError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.pipeline import BytesResult, Call, Endpoint
from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.stages.retry import CallWithRetries
from gateway.telemetry.metrics import Metrics
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway_server import GatewayServer, fake_policy, write_policy

ASK = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def _gateway(
    tmp_path: Path, upstream: FakeUpstream, models: list[str], retry: dict[str, Any]
) -> GatewayServer:
    document = fake_policy(upstream.base_url)
    # distinct names so each replica is its own state; the fake plays them by served model name
    document["pools"]["mixed"] = {
        "replicas": [
            {"base_url": upstream.base_url, "model": m, "name": f"r{i}"} for i, m in enumerate(models)
        ]
    }
    document["retry"] = retry
    return GatewayServer(write_policy(tmp_path / "p.yaml", document)).start()


def _count(upstream: FakeUpstream, since: int, model: str) -> int:
    return sum(1 for r in upstream.requests[since:] if r.get("model") == model)


@pytest.mark.parametrize("failing", ["fail-500", "ratelimited"])
def test_a_failed_attempt_is_retried_on_another_replica(
    tmp_path: Path, upstream: FakeUpstream, failing: str
) -> None:
    gateway = _gateway(tmp_path, upstream, [failing, "echo"], {"max_attempts": 3, "backoff_s": 0.001})
    try:
        since = len(upstream.requests)
        for stream in (False, True):
            response = httpx.post(
                gateway.url + "/v1/chat/completions", json={"model": "mixed", "stream": stream, **ASK}
            )
            assert response.status_code == 200
        assert _count(upstream, since, "echo") == 2
    finally:
        gateway.stop()


def test_attempts_are_bounded(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = _gateway(tmp_path, upstream, ["fail-500"] * 3, {"max_attempts": 2, "backoff_s": 0.001})
    try:
        since = len(upstream.requests)
        response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "mixed", **ASK})
        assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_error"
        assert _count(upstream, since, "fail-500") == 2
    finally:
        gateway.stop()


def test_client_errors_are_not_retried_and_the_deadline_wins(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = _gateway(tmp_path, upstream, ["reject-400", "reject-400"], {"max_attempts": 3})
    try:
        since = len(upstream.requests)
        response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "mixed", **ASK})
        assert response.status_code == 400
        assert _count(upstream, since, "reject-400") == 1
    finally:
        gateway.stop()
    # a backoff longer than the request's deadline (total_s 5) is not waited for
    gateway = _gateway(
        tmp_path,
        upstream,
        ["fail-500", "fail-500"],
        {"max_attempts": 3, "backoff_s": 30, "max_backoff_s": 30},
    )
    try:
        since = len(upstream.requests)
        response = httpx.post(
            gateway.url + "/v1/chat/completions", json={"model": "mixed", **ASK}, timeout=10
        )
        assert response.status_code == 502
        assert _count(upstream, since, "fail-500") == 1
        assert response.elapsed.total_seconds() < 2
    finally:
        gateway.stop()


# --- every failed attempt is counted, in memory -----------------------------------------------------


class _Pick:
    """Picks the pool's replicas in order, skipping those already tried."""

    def __init__(self, balancer: Balancer) -> None:
        self.balancer = balancer

    async def __call__(self, call: Call, exclude: tuple[ReplicaState, ...] = ()) -> None:
        assert call.pool is not None
        call.replica = next(s for s in self.balancer.replicas(call.pool) if s not in exclude)


class _Upstream:
    """Fails with each scripted error in turn, then answers."""

    def __init__(self, *errors: GatewayError) -> None:
        self.errors = list(errors)

    async def __call__(self, call: Call) -> None:
        if self.errors:
            raise self.errors.pop(0)
        call.result = BytesResult(200, b"{}")


async def _run(*errors: GatewayError, on_timeout: bool = False) -> tuple[Metrics, GatewayError | None]:
    replicas = [{"base_url": f"http://r{i}:8000/v1", "model": "m", "name": f"r{i}"} for i in range(3)]
    policy = parse_policy(
        {"pools": {"p": {"replicas": replicas}}, "retry": {"backoff_s": 0, "on_timeout": on_timeout}}, "t"
    )
    balancer = Balancer()
    balancer.update(policy)
    metrics = Metrics()
    stage = CallWithRetries(
        _Pick(balancer),  # type: ignore[arg-type]
        _Upstream(*errors),  # type: ignore[arg-type]
        on_attempt_error=metrics.count_upstream_error,
    )
    call = Call(Endpoint.CHAT, {"model": "p"}, {}, compile_policy(policy), "id", "p", pool="p")
    error: GatewayError | None = None
    try:
        await stage(call)
    except GatewayError as e:
        error = e
    metrics.record_call(call, error)  # what the call's finisher does
    return metrics, error


def _errors(metrics: Metrics) -> dict[str, float]:
    return {
        sample.labels["kind"]: sample.value
        for family in metrics.upstream_errors.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_retried_attempts_count_in_upstream_errors_as_well_as_the_last() -> None:
    metrics, error = await _run(UpstreamConnectError("refused"), UpstreamError("HTTP 500"))
    assert error is None  # the third attempt answered
    assert _errors(metrics) == {"upstream_connect_error": 1, "upstream_error": 1}
    metrics, error = await _run(
        UpstreamConnectError("refused"), UpstreamError("HTTP 500"), UpstreamError("x")
    )
    assert isinstance(error, UpstreamError)  # max_attempts 3: the last failure is the call's own
    assert _errors(metrics) == {"upstream_connect_error": 1, "upstream_error": 2}
    metrics, error = await _run(UpstreamStatusError(429, b"{}", "slow down"))
    assert error is None and _errors(metrics) == {"upstream_rate_limited": 1}


async def test_a_timeout_is_counted_once_and_retried_only_with_on_timeout() -> None:
    metrics, error = await _run(UpstreamTimeout("slow"))
    assert isinstance(error, UpstreamTimeout) and _errors(metrics) == {"upstream_timeout": 1}
    metrics, error = await _run(UpstreamTimeout("slow"), on_timeout=True)
    assert error is None and _errors(metrics) == {"upstream_timeout": 1}
