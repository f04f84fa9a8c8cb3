"""gateway/roles.py: the table, the check, and every admin route of a served gateway walked with every role.

The walk enumerates the app's own route table, so an admin route added without a row in
``gateway.roles.ROUTES`` fails here; each answer is checked against ``ACTIONS`` (allowed: neither 401
nor 403 nor 5xx; refused: 403, or 401 without a known key).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from litestar.routes import HTTPRoute

from gateway.errors import AuthenticationFailed, PermissionDenied
from gateway.keys.hashing import hash_key, new_key
from gateway.keys.records import KeyChanges, KeyRecord, KeySpec
from gateway.policy import PolicyError, parse_policy
from gateway.roles import ACTIONS, ROLES, ROUTES, Principal, authorize, markdown_table, may_grant
from tools.servers.gateway_server import GatewayServer, write_policy

ROOT = Path(__file__).resolve().parents[2]
KEYS = {name: new_key() for name in ("admin", "operator", "viewer", "tenant-admin", "plain")}
OWN, OTHER = "acme", "globex"
_POOL = {"small": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "m"}]}}


def _key_entry(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"sha256": hash_key(KEYS[name]), "tenant": OWN, "name": f"k-{name}"}
    if name == "admin":
        entry["admin"] = True  # the older spelling still means role admin
    elif name != "plain":
        entry["role"] = name
    return entry


def _as(name: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"} if name else {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    document = {"pools": _POOL, "keys": [_key_entry(n) for n in KEYS], "store": {"url_env": None}}
    path = write_policy(tmp_path_factory.mktemp("roles") / "policy.yaml", document)
    gateway = GatewayServer(path).start()
    yield gateway
    gateway.stop()


def _admin_routes(server: GatewayServer) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    others = [*server.app.websockets, *server.app.exchanges]  # served beside Litestar: none is admin
    assert not [p for p in others if str(p).startswith("/v1/admin") or p == "/v1/usage"]
    for route in server.app.litestar.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        if path.startswith("/v1/admin") or path == "/v1/usage":
            found |= {(str(m), path) for m in route.methods if m not in ("OPTIONS", "HEAD")}
    return found


def test_every_admin_route_of_the_app_has_a_row_in_the_table(server: GatewayServer) -> None:
    assert _admin_routes(server) == set(ROUTES)
    assert set(ROUTES.values()) <= set(ACTIONS)


_serial = iter(range(10_000))


def _call(
    client: httpx.Client, method: str, path: str, who: str | None, tenant: str, target: str
) -> httpx.Response:
    """One admin route, on ``tenant``'s data (a key of it, its usage, a key made for it)."""
    url = path.replace("{name}", target)
    body: dict[str, Any] | None = None
    if path == "/v1/admin/route/explain":
        body = {"prompt": "hello"}
    elif (method, path) == ("POST", "/v1/admin/keys"):
        body = {"tenant": tenant, "name": f"made-{next(_serial)}"}
    elif method == "PATCH":
        body = {"limits": {"requests_per_minute": 60}}
    elif path.endswith("/rotate"):
        body = {"grace_s": 0}
    query = {"tenant": tenant} if path in ("/v1/usage", "/v1/admin/keys") and method == "GET" else {}
    return client.request(method, url, json=body, params=query, headers=_as(who))


def _expected(action: str, who: str | None, tenant: str) -> int | None:
    """401, 403, or None for allowed (any answer but 401/403/5xx)."""
    if who is None:
        return 401
    rule = ACTIONS[action]
    role = None if who == "plain" else who
    if role not in rule.roles:
        return 403
    if role == "tenant-admin" and rule.tenant_scoped and tenant != OWN:
        return 403
    return None


def test_every_admin_route_answers_every_role_as_the_table_says(server: GatewayServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        targets = {}
        for tenant in (OWN, OTHER):  # a run-time key in each tenant, for the routes that name one
            made = client.post("/v1/admin/keys", json={"tenant": tenant}, headers=_as("admin"))
            assert made.status_code == 200, made.text
            targets[tenant] = made.json()["name"]
        wrong = []
        for (method, path), action in sorted(ROUTES.items()):
            for who in (*ROLES, "plain", None):
                for tenant in (OWN, OTHER):
                    answer = _call(client, method, path, who, tenant, targets[tenant])
                    want, got = _expected(action, who, tenant), answer.status_code
                    ok = got == want if want is not None else got not in (401, 403) and got < 500
                    if not ok:
                        wrong.append((method, path, who, tenant, got, want, answer.text[:120]))
                    if got == 403:
                        _check_refusal(answer.json()["error"], who)
        # POST /v1/admin/drain came after its DELETE: ready again for the tests that follow
        assert client.delete("/v1/admin/drain", headers=_as("admin")).json()["draining"] is False
        assert not server.gateway.is_draining
    assert wrong == []


def _check_refusal(error: dict[str, Any], who: str | None) -> None:
    """OpenAI's shape, no param, the role needed named; a key without a role keeps the older code."""
    assert error["param"] is None and error["type"] == "invalid_request_error"
    assert error["code"] == ("admin_key_required" if who == "plain" else "insufficient_role")
    assert " needs the role " in error["message"]


def test_a_tenant_admin_gives_no_role_above_its_own(server: GatewayServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        ta = _as("tenant-admin")
        for role in ("admin", "operator", "viewer"):
            refused = client.post("/v1/admin/keys", json={"tenant": OWN, "role": role}, headers=ta)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_role"
        legacy = client.post("/v1/admin/keys", json={"tenant": OWN, "admin": True}, headers=ta)
        assert legacy.status_code == 403
        peer = client.post("/v1/admin/keys", json={"tenant": OWN, "role": "tenant-admin"}, headers=ta)
        assert peer.status_code == 200 and peer.json()["role"] == "tenant-admin"
        # a key of its own tenant with a higher role is not its to change (its secret would be)
        boss = client.post("/v1/admin/keys", json={"tenant": OWN, "role": "operator"}, headers=_as("admin"))
        name = boss.json()["name"]
        assert client.post(f"/v1/admin/keys/{name}/rotate", json={}, headers=ta).status_code == 403
        raise_it = client.patch(f"/v1/admin/keys/{peer.json()['name']}", json={"role": "admin"}, headers=ta)
        assert raise_it.status_code == 403
        listed = client.get("/v1/admin/keys", headers=ta).json()["data"]
        assert {k["tenant"] for k in listed} == {OWN}


def test_a_role_set_through_the_api_opens_the_admin_routes(server: GatewayServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        made = client.post("/v1/admin/keys", json={"tenant": OTHER, "role": "viewer"}, headers=_as("admin"))
        assert made.status_code == 200 and made.json()["role"] == "viewer"
        viewer = {"Authorization": f"Bearer {made.json()['key']}"}
        assert client.get("/v1/admin/pools", headers=viewer).status_code == 200
        assert client.get("/v1/admin/keys", headers=viewer).status_code == 403
        name = made.json()["name"]
        dropped = client.patch(f"/v1/admin/keys/{name}", json={"role": None}, headers=_as("admin"))
        assert dropped.status_code == 200 and dropped.json()["role"] is None
        assert client.get("/v1/admin/pools", headers=viewer).status_code == 403
        both = client.post(
            "/v1/admin/keys", json={"tenant": OTHER, "admin": True, "role": "viewer"}, headers=_as("admin")
        )
        assert both.status_code == 400


def test_authorize_takes_any_principal() -> None:
    authorize(Principal("sso:alice", None, "viewer"), "pools.read")
    authorize(Principal("sso:bob", "acme", "tenant-admin"), "usage.read", "acme")
    with pytest.raises(PermissionDenied, match=r"usage\.read on tenant 'globex' needs the role admin"):
        authorize(Principal("sso:bob", "acme", "tenant-admin"), "usage.read", "globex")
    with pytest.raises(PermissionDenied, match=r"keys\.write needs the role admin or tenant-admin"):
        authorize(Principal("sso:carol", None, "operator"), "keys.write")
    with pytest.raises(AuthenticationFailed):
        authorize(None, "pools.read")
    may_grant(Principal("root", None, "admin"), "operator")
    with pytest.raises(PermissionDenied):
        may_grant(Principal("bob", "acme", "tenant-admin"), "viewer")


def test_admin_true_means_role_admin_and_a_contradiction_is_refused() -> None:
    def policy(**key: Any) -> Any:
        entry = {"sha256": "a" * 64, "tenant": "t", **key}
        return parse_policy({"pools": _POOL, "keys": [entry]}, "test")

    assert policy(admin=True).keys[0].effective_role == "admin"
    assert policy(role="viewer").keys[0].effective_role == "viewer"
    assert policy().keys[0].effective_role is None
    with pytest.raises(PolicyError):
        policy(admin=True, role="viewer")
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"tenant": "t", "admin": true, "role": "operator"}', type=KeySpec)


def test_the_table_in_docs_security_md_is_the_one_the_checks_read() -> None:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert markdown_table() in text, "docs/security.md: paste gateway.roles.markdown_table() under Roles"


def test_a_patch_keeps_the_admin_flag_and_the_role_agreeing() -> None:
    record = KeyRecord(name="k", tenant="t", secrets=(), created_at=0.0, created_by="root", admin=True)

    def after(body: bytes, on: KeyRecord = record) -> tuple[bool, str | None]:
        return msgspec.json.decode(body, type=KeyChanges).role_of(on)

    assert after(b'{"role": "viewer"}') == (False, "viewer")  # a role alone replaces the flag
    assert after(b'{"limits": null}') == (True, None)  # untouched
    viewer = msgspec.structs.replace(record, admin=False, role="viewer")
    assert after(b'{"admin": false}', viewer) == (False, "viewer")
    assert after(b'{"admin": true}', viewer) == (True, None)
    with pytest.raises(ValueError):
        after(b'{"admin": true, "role": "operator"}')
