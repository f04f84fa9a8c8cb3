"""Failed authentications and open-endpoint requests, bounded per client address, on real servers.

Every request comes from 127.0.0.1; ``X-Forwarded-For`` stands in for other clients where the
policy trusts loopback as a proxy. The bounds are per minute and each test ends within seconds, so no
count here depends on timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
WRONG = {"Authorization": "Bearer sk-sy-wrong"}
BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def _policy(tmp_path: Path, upstream: FakeUpstream, *, redis: bool = False, **unauthenticated: Any) -> Path:
    document = fake_policy(upstream.base_url)
    document["auth"] = {"required": True}
    document["keys"] = [{"sha256": hash_key(KEY), "tenant": "acme", "name": "k"}]
    document["limits"] = {"unauthenticated": {"failed_auths_per_minute": 3, **unauthenticated}}
    if redis:
        document["store"] = {"url_env": "SORTYARD_REDIS_URL", "timeout_s": 2.0}
    return write_policy(tmp_path / "policy.yaml", document)


def _chat(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=BODY, headers=headers, timeout=10)


def test_wrong_keys_get_401_then_429_while_a_good_key_still_passes(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    server = GatewayServer(_policy(tmp_path, upstream)).start()
    try:
        assert [_chat(server.url, WRONG).status_code for _ in range(3)] == [401, 401, 401]
        refused = _chat(server.url, WRONG)
        assert refused.status_code == 429
        assert refused.json()["error"] == {
            "message": refused.json()["error"]["message"],
            "type": "rate_limit_error",
            "param": None,
            "code": "too_many_auth_failures",
        }
        assert 1 <= int(refused.headers["retry-after"]) <= 61
        missing = _chat(server.url, {})  # no key at all is a failure too
        assert missing.status_code == 429
        models = httpx.get(server.url + "/v1/models", headers=WRONG)  # every route that checks a key
        assert models.status_code == 429
        # the address is refused for failing, not for calling: a valid key from it passes
        assert _chat(server.url, {"Authorization": f"Bearer {KEY}"}).status_code == 200
        good_models = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert good_models.status_code == 200
        metrics = httpx.get(server.url + "/metrics").text
        assert 'sortyard_client_rate_limited_total{reason="auth_failures"} 3.0' in metrics
    finally:
        server.stop()


def test_two_replicas_sharing_redis_enforce_one_bound(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SORTYARD_REDIS_URL", redis_flushed)
    policy = _policy(tmp_path, upstream, redis=True)
    servers = [GatewayServer(policy).start() for _ in range(2)]
    try:
        statuses = [_chat(servers[i % 2].url, WRONG).status_code for i in range(10)]
        assert statuses == [401, 401, 401] + [429] * 7
        assert _chat(servers[1].url, {"Authorization": f"Bearer {KEY}"}).status_code == 200
    finally:
        for server in servers:
            server.stop()


def test_forwarded_for_is_believed_only_from_trusted_proxies(tmp_path: Path, upstream: FakeUpstream) -> None:
    behind_proxy = GatewayServer(_policy(tmp_path, upstream, trusted_proxies=["127.0.0.1/32"])).start()
    try:
        for client in ("198.51.100.1", "198.51.100.2"):  # two clients behind the proxy, three each
            headers = {**WRONG, "X-Forwarded-For": f"203.0.113.9, {client}"}
            assert [_chat(behind_proxy.url, headers).status_code for _ in range(4)] == [401, 401, 401, 429]
    finally:
        behind_proxy.stop()
    (tmp_path / "other").mkdir()
    direct = GatewayServer(_policy(tmp_path / "other", upstream, trusted_proxies=["10.0.0.0/8"])).start()
    try:  # loopback is no trusted proxy here: a client cannot escape its bound by naming others
        statuses = [
            _chat(direct.url, {**WRONG, "X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(5)
        ]
        assert statuses == [401, 401, 401, 429, 429]
    finally:
        direct.stop()


def test_open_endpoints_are_bounded_and_probes_never(tmp_path: Path, upstream: FakeUpstream) -> None:
    server = GatewayServer(_policy(tmp_path, upstream, requests_per_minute=4)).start()
    try:
        paths = ["/metrics", "/openapi.json"] * 3
        statuses = [httpx.get(server.url + path).status_code for path in paths]
        assert statuses == [200, 200, 200, 200, 429, 429]
        refused = httpx.get(server.url + "/metrics")
        assert refused.json()["error"]["code"] == "rate_limit_exceeded" and "retry-after" in refused.headers
        probes = [httpx.get(server.url + path).status_code for path in ["/healthz", "/readyz"] * 20]
        assert probes == [200] * 40
    finally:
        server.stop()
