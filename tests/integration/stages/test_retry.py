"""Retries before the first byte: on another replica, bounded by attempts and the deadline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

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


def test_replicas_that_answered_429_are_not_asked_again_and_the_client_hears_retry_after(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    gateway = _gateway(tmp_path, upstream, ["ratelimited"] * 2, {"max_attempts": 5, "backoff_s": 0.001})
    try:
        since = len(upstream.requests)
        response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "mixed", **ASK})
        assert response.status_code == 429 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "rate_limit_exceeded"  # the upstream's own body
        assert _count(upstream, since, "ratelimited") == 2  # each replica once, not five attempts
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
