"""The console's routes on a real gateway (loopback, in front of the fake upstream): the page, and the
admin JSON endpoints it reads, with their shapes, admin-only access and OpenAI-shaped errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

ADMIN = new_key()
USER = new_key()
PROMPT = "Prove that there are infinitely many primes."


def _policy(base_url: str, **extra: Any) -> dict[str, Any]:
    document = fake_policy(base_url)
    pools = document["pools"]
    document["pools"] = {
        "small": pools["small"],
        "medium": pools["small"],
        "large": pools["small"],
        "down": pools["down"],
    }
    document["aliases"] = {}
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "root", "admin": True},
        {"sha256": hash_key(USER), "tenant": "team-a", "name": "user"},
    ]
    document["classifier"] = {"kind": "learned"}
    # a refused connect opens the down pool's breaker at once; no probes: nothing closes it meanwhile
    document["routing"] = {
        "health": {"probe_interval_s": 0},
        "pools": {"down": {"breaker": {"failure_threshold": 1, "open_s": 600}}},
    }
    document.update(extra)
    return document


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def gateway(tmp_path: Path, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    server = GatewayServer(write_policy(tmp_path / "policy.yaml", _policy(upstream.base_url))).start()
    yield server
    server.stop()


def _call(
    gateway: GatewayServer, method: str, path: str, key: str | None = ADMIN, **kwargs: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, gateway.url + path, headers=headers, timeout=10, **kwargs)


def _chat(gateway: GatewayServer, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return _call(gateway, "POST", "/v1/chat/completions", USER, json=body)


def test_the_page_is_served_without_a_key(gateway: GatewayServer) -> None:
    response = _call(gateway, "GET", "/console", key=None)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "<title>Sortyard console</title>" in response.text
    assert ADMIN not in response.text and hash_key(ADMIN) not in response.text


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/admin/pools"), ("POST", "/v1/admin/route/explain"), ("GET", "/v1/admin/policy")],
)
def test_the_endpoints_are_for_admin_keys_only(gateway: GatewayServer, method: str, path: str) -> None:
    body = {"prompt": "hi"} if method == "POST" else None
    anonymous = _call(gateway, method, path, key=None, json=body)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
    user = _call(gateway, method, path, key=USER, json=body)
    assert user.status_code == 403 and "needs the role admin, operator or viewer" in user.text
    assert user.json() == {
        "error": {
            "message": user.json()["error"]["message"],
            "type": "invalid_request_error",
            "param": None,
            "code": "admin_key_required",
        }
    }
    assert _call(gateway, method, path, json=body).status_code == 200


def test_pools_show_health_breakers_and_recent_latency(gateway: GatewayServer) -> None:
    for _ in range(3):
        assert _chat(gateway, "small").status_code == 200
    assert _chat(gateway, "down").status_code == 502  # refused: the breaker opens
    gateway.settle()
    view = _call(gateway, "GET", "/v1/admin/pools").json()
    assert view["object"] == "list" and view["as_of"] <= time.time()
    pools = {pool["name"]: pool for pool in view["data"]}
    assert list(pools) == ["small", "medium", "large", "down"]
    (small,) = pools["small"]["replicas"]
    assert (small["healthy"], small["breaker"], small["outstanding"]) == (True, "closed", 0)
    assert (small["num_successes"], small["num_failures"], small["model"]) == (3, 0, "echo")
    assert (
        small["latency"]["num_samples"] == 3 and 0 < small["latency"]["p50_ms"] <= small["latency"]["max_ms"]
    )
    (down,) = pools["down"]["replicas"]
    assert (down["healthy"], down["breaker"], down["num_failures"]) == (False, "open", 1)
    assert down["latency"]["num_samples"] == 0 and down["latency"]["p50_ms"] is None


def test_route_explain_answers_as_the_classifier_routes(gateway: GatewayServer) -> None:
    answer = _call(gateway, "POST", "/v1/admin/route/explain", json={"prompt": PROMPT}).json()
    assert answer["pool"] == "large" and answer["reason"].startswith("learned p(large)=")
    assert set(answer["probabilities"]) == {"small", "medium", "large"}
    assert (answer["classifier"], answer["auto_model"]) == ("learned", "auto")
    routed = _call(
        gateway,
        "POST",
        "/v1/chat/completions",
        USER,
        json={"model": "auto", "messages": [{"role": "user", "content": PROMPT}]},
    )
    assert routed.headers["x-sortyard-pool"] == answer["pool"]
    assert routed.headers["x-sortyard-route-reason"] == answer["reason"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"{not json", "invalid_json", None),
        (b'{"system": "x"}', "invalid_request", None),
        (b'{"prompt": 3}', "invalid_request", "prompt"),
        (b'{"prompt": "hi", "extra": 1}', "invalid_request", None),
    ],
)
def test_route_explain_refuses_bad_bodies(
    gateway: GatewayServer, body: bytes, code: str, param: str | None
) -> None:
    response = _call(gateway, "POST", "/v1/admin/route/explain", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")


def test_the_policy_view_follows_reloads(
    gateway: GatewayServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    before = _call(gateway, "GET", "/v1/admin/policy").json()
    assert before["source"] == str(tmp_path / "policy.yaml") and before["num_reloads"] == 0
    assert [key["name"] for key in before["policy"]["keys"]] == ["root", "user"]
    assert hash_key(ADMIN) not in str(before) and "sha256" not in str(before)
    assert before["policy"]["classifier"]["kind"] == "learned"

    write_policy(tmp_path / "policy.yaml", _policy(upstream.base_url, aliases={"gpt-4o-mini": "small"}))
    deadline = time.monotonic() + 15
    while (after := _call(gateway, "GET", "/v1/admin/policy").json())["num_reloads"] == 0:  # the file poll
        assert time.monotonic() < deadline, "the reloader never adopted the new file"
        time.sleep(0.05)
    assert after["policy"]["aliases"] == {"gpt-4o-mini": "small"}
    assert after["loaded_at"] > before["loaded_at"] and after["last_error"] is None


def test_route_explain_without_a_classifier_is_a_404(tmp_path: Path, upstream: FakeUpstream) -> None:
    path = write_policy(tmp_path / "policy.yaml", _policy(upstream.base_url, classifier=None))
    server = GatewayServer(path).start()
    try:
        response = _call(server, "POST", "/v1/admin/route/explain", json={"prompt": "hi"})
    finally:
        server.stop()
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "classifier_not_configured"


def test_the_page_is_counted_per_client_like_the_other_open_routes(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    limits = {"unauthenticated": {"requests_per_minute": 2}}
    server = GatewayServer(write_policy(tmp_path / "policy.yaml", _policy(upstream.base_url, limits=limits)))
    server.start()
    try:
        statuses = [_call(server, "GET", "/console", key=None).status_code for _ in range(3)]
        refused = _call(server, "GET", "/console", key=None)
    finally:
        server.stop()
    assert statuses == [200, 200, 429]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
