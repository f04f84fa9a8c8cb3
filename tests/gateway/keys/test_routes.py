"""gateway/keys/routes.py: the key admin API served, for what only a real route shows: a name the URL
can carry, limits merged per field, a revoked key left as it is, and a refusal naming what was tried."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.gateway_server import GatewayServer, write_policy

ADMIN, TENANT_ADMIN = new_key(), new_key()
_POOL = {"small": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "m"}]}}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    keys = [
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "root", "role": "admin"},
        {"sha256": hash_key(TENANT_ADMIN), "tenant": "acme", "name": "acme-admin", "role": "tenant-admin"},
    ]
    document = {"pools": _POOL, "keys": keys, "store": {"url_env": None}}
    path = write_policy(tmp_path_factory.mktemp("key-routes") / "policy.yaml", document)
    gateway = GatewayServer(path).start()
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        yield http
    gateway.stop()


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _make(client: httpx.Client, name: str, **fields: Any) -> dict[str, Any]:
    made = client.post("/v1/admin/keys", json={"tenant": "acme", "name": name, **fields}, headers=_as(ADMIN))
    assert made.status_code == 200, made.text
    return dict(made.json())


def test_a_name_with_a_slash_is_refused_as_no_route_could_reach_the_key(client: httpx.Client) -> None:
    refused = client.post("/v1/admin/keys", json={"tenant": "acme", "name": "a/b"}, headers=_as(ADMIN))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error.keys() == {"message", "type", "code", "param"}
    assert (error["type"], error["param"]) == ("invalid_request_error", "name")
    listed = client.get("/v1/admin/keys", headers=_as(ADMIN)).json()["data"]
    assert "a/b" not in [key["name"] for key in listed]
    made = _make(client, "ci.v2:east-1_b")  # every other character a name had still works
    assert client.get(f"/v1/admin/keys/{made['name']}", headers=_as(ADMIN)).status_code == 200


def test_a_patch_merges_limits_per_field(client: httpx.Client) -> None:
    _make(client, "merged", limits={"requests_per_minute": 60}, budget={"monthly_usd": 50})

    def patch(**limits: int | None) -> dict[str, Any]:
        answer = client.patch("/v1/admin/keys/merged", json={"limits": limits}, headers=_as(ADMIN))
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    changed = patch(tokens_per_minute=100_000)
    assert changed["limits"] == {
        "requests_per_minute": 60,
        "tokens_per_minute": 100_000,
        "max_concurrent": None,
    }
    assert changed["budget"] == {"monthly_usd": 50}
    limits = patch(requests_per_minute=None)["limits"]
    assert limits["requests_per_minute"] is None and limits["tokens_per_minute"] == 100_000
    assert patch(tokens_per_minute=None)["limits"] is None


def test_a_revoked_key_is_not_changed(client: httpx.Client) -> None:
    _make(client, "gone")
    assert client.post("/v1/admin/keys/gone/revoke", headers=_as(ADMIN)).status_code == 200
    patch = {"limits": {"requests_per_minute": 5}}
    refused = client.patch("/v1/admin/keys/gone", json=patch, headers=_as(ADMIN))
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "key_revoked"
    shown = client.get("/v1/admin/keys/gone", headers=_as(ADMIN)).json()
    assert shown["limits"] is None and shown["revision"] == 2  # made, revoked: nothing since


@pytest.mark.parametrize(
    ("method", "suffix", "doing"),
    [
        ("POST", "/revoke", "Revoking"),
        ("DELETE", "", "Revoking"),
        ("POST", "/rotate", "Rotating"),
        ("PATCH", "", "Changing"),
    ],
)
def test_a_tenant_admin_is_told_what_it_may_not_do_to_a_key_with_another_role(
    client: httpx.Client, method: str, suffix: str, doing: str
) -> None:
    name = f"viewer-{method.lower()}-{suffix.strip('/') or 'key'}"
    _make(client, name, role="viewer")
    body = {"limits": {"requests_per_minute": 1}} if method == "PATCH" else None
    refused = client.request(method, f"/v1/admin/keys/{name}{suffix}", json=body, headers=_as(TENANT_ADMIN))
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "insufficient_role"
    assert error["message"] == (
        f"{doing} a key with the role viewer needs the role admin; this key has role tenant-admin."
    )
