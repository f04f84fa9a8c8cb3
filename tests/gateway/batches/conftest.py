"""Gateways with the Files and Batch APIs on loopback, the fake upstream behind them, and the openai SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.batches import BatchFeature
from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
OTHER = new_key()
REDIS_ENV = "SORTYARD_TEST_BATCHES_REDIS_URL"
TEXT = "Hello from the fake upstream."


class Clock:
    """Unix time, moved forward by the test (a completion window is 24 hours)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


def batch_file(n: int, *, model: str = "gpt-4o-mini", prefix: str = "req") -> bytes:
    """``n`` chat requests, each with its own prompt (so no response cache answers one for another)."""
    lines = [
        {
            "custom_id": f"{prefix}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"{prefix} prompt {i}"}]},
        }
        for i in range(n)
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def wait_for(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def policy_document(
    upstream: FakeUpstream, files_dir: Path, *, redis: bool = False, **batches: Any
) -> dict[str, Any]:
    document = fake_policy(upstream.base_url)
    document["pools"]["gated"] = {"replicas": [{"base_url": upstream.base_url, "model": "gated"}]}
    document["aliases"]["gated-model"] = "gated"
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "evals"},
        {"sha256": hash_key(OTHER), "tenant": "globex", "name": "other", "priority": 5},
    ]
    document["store"] = {"url_env": REDIS_ENV if redis else None}
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 30, "idle_s": 30, "total_s": 60}
    document["batches"] = {"files_dir": str(files_dir), "poll_interval_s": 0.05, "concurrency": 4, **batches}
    return document


def start_gateway(policy_path: Path, clock: Clock | None = None) -> tuple[GatewayServer, BatchFeature]:
    """A gateway on loopback (``create_app`` adds the batch routes and runner), on ``clock`` if given."""
    server = GatewayServer(policy_path)
    feature: BatchFeature = server.app.litestar.state.batches
    if clock is not None:
        feature.service.clock = feature.service.files.clock = clock
    server.start()
    return server, feature


def client(server: GatewayServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    return write_policy(tmp_path / "policy.yaml", document)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def sent_prompts(upstream: FakeUpstream, prefix: str) -> list[str]:
    """The prompts of this test's lines the upstream got, one entry a request it received."""
    found = []
    for body in list(upstream.requests):
        messages = body.get("messages") or []
        content = messages[0].get("content") if messages else None
        if isinstance(content, str) and content.startswith(f"{prefix} prompt"):
            found.append(content)
    return found
