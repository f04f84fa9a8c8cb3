"""Keys managed at run time, on two gateway replicas sharing a real Redis, called with the openai SDK.

A key made, changed, rotated or revoked through one replica's admin API is honoured or refused by the
other at its next poll of the key store (``keys_refresh_s``, 0.5 s): the tests wait for that poll to
have happened (the replica's registry version), never for a guessed time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.cli.parser import main as cli
from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow

ROOT = new_key()
USER = new_key()
MESSAGES: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture
def replicas(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[GatewayServer, GatewayServer]]:
    monkeypatch.setenv("SORTYARD_REDIS_URL", request.getfixturevalue("redis_flushed"))
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["store"] = {"url_env": "SORTYARD_REDIS_URL", "timeout_s": 2.0}
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(ROOT), "tenant": "ops", "name": "root", "admin": True},
        {"sha256": hash_key(USER), "tenant": "team-a", "name": "user"},
    ]
    path = write_policy(tmp_path / "policy.yaml", document)
    a, b = GatewayServer(path).start(), GatewayServer(path).start()
    yield a, b
    a.stop()
    b.stop()
    upstream.stop()


def _admin(
    gateway: GatewayServer, method: str, path: str, body: Any = None, key: str = ROOT
) -> httpx.Response:
    return httpx.request(
        method, gateway.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def _chat(gateway: GatewayServer, key: str) -> str:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)
    answer = client.chat.completions.create(model="small", messages=MESSAGES)
    return answer.choices[0].message.content or ""


def _status(gateway: GatewayServer, key: str) -> int:
    try:
        _chat(gateway, key)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Wait for ``condition`` (a replica's poll to have happened), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _caught_up(follower: GatewayServer, leader: GatewayServer) -> Callable[[], bool]:
    """The follower's key registry has polled the store past the leader's last write."""
    return lambda: follower.gateway.keys.version >= leader.gateway.keys.version


def test_a_key_made_on_one_replica_works_on_the_other_until_it_is_revoked(
    replicas: tuple[GatewayServer, GatewayServer], capfd: pytest.CaptureFixture[str]
) -> None:
    a, b = replicas
    made = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "name": "ci", "models": ["small"]})
    assert made.status_code == 200, made.text
    secret = made.json()["key"]
    assert made.json()["source"] == "api" and made.json()["tenant"] == "team-b"
    assert _chat(a, secret) == "Hello from the fake upstream."  # the maker serves it at once
    _until(_caught_up(b, a), "replica b saw the new key")
    assert _chat(b, secret) == "Hello from the fake upstream."

    listed = {k["name"]: k for k in _admin(b, "GET", "/v1/admin/keys").json()["data"]}
    assert {name: k["source"] for name, k in listed.items()} == {
        "root": "policy",
        "user": "policy",
        "ci": "api",
    }
    assert all("key" not in k or k["key"] is None for k in listed.values())  # never shown again

    assert _admin(a, "POST", "/v1/admin/keys/ci/revoke").json()["status"] == "revoked"
    assert _status(a, secret) == 401
    _until(_caught_up(b, a), "replica b saw the revocation")
    assert _status(b, secret) == 401

    a.settle()
    b.settle()
    out, err = capfd.readouterr()
    assert secret not in out + err  # neither logs nor access logs ever carry a key


def test_a_limit_set_at_run_time_is_enforced_by_every_replica(
    replicas: tuple[GatewayServer, GatewayServer],
) -> None:
    a, b = replicas
    secret = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "name": "capped"}).json()["key"]
    updated = _admin(a, "PATCH", "/v1/admin/keys/capped", {"limits": {"requests_per_minute": 2}})
    assert updated.status_code == 200 and updated.json()["revision"] == 2
    _until(_caught_up(b, a), "replica b saw the limit")
    assert [_status(gw, secret) for gw in (a, b, a, b)] == [200, 200, 429, 429]


def test_a_rotated_key_works_with_both_secrets_for_the_grace_period(
    replicas: tuple[GatewayServer, GatewayServer],
) -> None:
    a, b = replicas
    old = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "name": "svc"}).json()["key"]
    rotated = _admin(a, "POST", "/v1/admin/keys/svc/rotate", {"grace_s": 600})
    new = rotated.json()["key"]
    assert rotated.status_code == 200 and new != old and len(rotated.json()["fingerprints"]) == 2
    _until(_caught_up(b, a), "replica b saw the rotation")
    assert _status(b, old) == _status(b, new) == 200
    _admin(a, "POST", "/v1/admin/keys/svc/rotate", {"grace_s": 0})  # old secrets stop at once
    _until(_caught_up(b, a), "replica b saw the second rotation")
    assert _status(b, old) == _status(b, new) == 401


def test_only_admin_keys_manage_keys_and_the_policy_files_keys_are_read_only(
    replicas: tuple[GatewayServer, GatewayServer],
) -> None:
    a, _ = replicas
    refused = _admin(a, "GET", "/v1/admin/keys", key=USER)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_key_required"
    assert _admin(a, "GET", "/v1/admin/keys", key="sk-wrong").status_code == 401
    in_policy = _admin(a, "POST", "/v1/admin/keys/user/revoke")
    assert in_policy.status_code == 409 and in_policy.json()["error"]["code"] == "key_in_policy"
    taken = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "name": "user"})
    assert taken.status_code == 409
    bad = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "limits": {"requests_per_minute": -1}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limits.requests_per_minute"
    whole = _admin(a, "POST", "/v1/admin/keys", {"tenant": "team-b", "limits": {"requests_per_minute": 5.0}})
    assert (
        whole.status_code == 200 and whole.json()["limits"]["requests_per_minute"] == 5
    )  # JSON Schema's integer
    unknown = _admin(a, "GET", "/v1/admin/keys/nobody")
    assert unknown.status_code == 404 and set(unknown.json()["error"]) == {"message", "type", "param", "code"}


def test_the_cli_manages_keys_through_the_api_and_the_audit_trail_names_who_did_what(
    replicas: tuple[GatewayServer, GatewayServer], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = replicas
    base = ["--url", a.url, "--admin-key", ROOT]
    assert cli(["keys", "create", *base, "--tenant", "team-c", "--name", "bot", "--rpm", "10"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["limits"]["requests_per_minute"] == 10 and made["key"].startswith("sk-sy-")
    assert cli(["keys", "update", *base, "bot", "--models", "small"]) == 0
    assert cli(["keys", "rotate", *base, "bot", "--grace-s", "30"]) == 0
    assert cli(["keys", "revoke", *base, "bot"]) == 0
    capsys.readouterr()
    assert cli(["keys", "show", "--url", b.url, "--admin-key", USER, "bot"]) == 1
    assert "admin key" in capsys.readouterr().err
    assert cli(["keys", "audit", "--url", b.url, "--admin-key", ROOT]) == 0
    trail = [(e["actor"], e["action"], e["key"]) for e in json.loads(capsys.readouterr().out)["data"]]
    assert trail == [("root", a, "bot") for a in ("revoke", "rotate", "update", "create")]
