"""Routing `model: "auto"` through the policy's classifier, with explanations and sticky conversations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.policy import PolicyError, load_policy
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

RULES = {"kind": "rules", "rules": [{"pool": "large", "keywords": ["prove"]}], "fallback_pool": "small"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def _policy(upstream: FakeUpstream, classifier: dict[str, Any]) -> dict[str, Any]:
    document = fake_policy(upstream.base_url)
    document["pools"]["large"] = {"replicas": [{"base_url": upstream.base_url, "model": "echo"}]}
    document["pools"]["medium"] = {"replicas": [{"base_url": upstream.base_url, "model": "echo"}]}
    document["classifier"] = classifier
    document["aliases"]["router"] = "auto"
    return document


def _ask(gateway: GatewayServer, messages: list[dict[str, str]], model: str = "auto") -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", json={"model": model, "messages": messages})


def test_auto_uses_the_classifier_and_explains(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", _policy(upstream, RULES))).start()
    try:
        hard = _ask(gateway, [{"role": "user", "content": "Prove that there are infinitely many primes."}])
        assert hard.status_code == 200 and hard.headers["x-sortyard-pool"] == "large"
        assert "prove" in hard.headers["x-sortyard-route-reason"]
        assert hard.json()["model"] == "auto"
        easy = _ask(gateway, [{"role": "user", "content": "hello!"}], model="router")
        assert easy.headers["x-sortyard-pool"] == "small"
        direct = _ask(gateway, [{"role": "user", "content": "prove it"}], model="small")
        assert direct.headers["x-sortyard-pool"] == "small"
        assert direct.headers["x-sortyard-route-reason"] == "pool"
        models = [m["id"] for m in httpx.get(gateway.url + "/v1/models").json()["data"]]
        assert "auto" in models and "router" in models
    finally:
        gateway.stop()


def test_a_conversation_keeps_its_tier(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", _policy(upstream, RULES))).start()
    try:
        turns = [
            {"role": "system", "content": "You are a maths tutor."},
            {"role": "user", "content": "Prove that sqrt(2) is irrational."},
        ]
        first = _ask(gateway, turns)
        assert first.headers["x-sortyard-pool"] == "large"
        turns += [{"role": "assistant", "content": "Suppose..."}, {"role": "user", "content": "thanks!"}]
        later = _ask(gateway, turns)
        assert later.headers["x-sortyard-pool"] == "large"
        # a later turn still says why its conversation got its tier
        reason = first.headers["x-sortyard-route-reason"]
        assert reason and later.headers["x-sortyard-route-reason"] == f"sticky conversation ({reason})"
    finally:
        gateway.stop()
    unsticky = _policy(upstream, {**RULES, "sticky_conversations": False})
    gateway = GatewayServer(write_policy(tmp_path / "q.yaml", unsticky)).start()
    try:
        assert _ask(gateway, turns).headers["x-sortyard-pool"] == "small"
    finally:
        gateway.stop()


def test_the_shipped_learned_classifier_routes(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", _policy(upstream, {"kind": "learned"}))).start()
    try:
        response = _ask(
            gateway,
            [
                {
                    "role": "user",
                    "content": "Design a globally distributed database with "
                    "strong consistency and explain the trade-offs step by step.",
                }
            ],
        )
        assert response.status_code == 200
        assert response.headers["x-sortyard-route-reason"].startswith("learned")
        assert response.headers["x-sortyard-pool"] in ("small", "medium", "large")
    finally:
        gateway.stop()


@pytest.mark.parametrize("content", [None, b"", b"not a model file at all"])
def test_a_missing_or_corrupt_classifier_file_is_refused_at_load(
    tmp_path: Path, upstream: FakeUpstream, content: bytes | None
) -> None:
    model = tmp_path / "router.bin"
    if content is not None:
        model.write_bytes(content)
    path = write_policy(tmp_path / "p.yaml", _policy(upstream, {"kind": "learned", "path": str(model)}))
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert "classifier:" in str(info.value) and "router.bin" in str(info.value)
