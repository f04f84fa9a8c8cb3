"""The admin operations on a real gateway (loopback, in front of the fake upstream), keys with roles in
the policy: an operator reloads a changed file (the new pool serves) and an invalid one (refused, the
old policy serves), drains and undoes it; a viewer may do neither; the audit trail names the caller."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli.parser import main as cli
from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

OPERATOR, VIEWER, USER = new_key(), new_key(), new_key()


def _policy(base_url: str, *pools: str) -> dict[str, Any]:
    document = fake_policy(base_url)
    document["pools"] = {name: document["pools"]["small"] for name in ("small", *pools)}
    document["aliases"] = {}
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(OPERATOR), "tenant": "ops", "name": "ops-operator", "role": "operator"},
        {"sha256": hash_key(VIEWER), "tenant": "ops", "name": "ops-viewer", "role": "viewer"},
        {"sha256": hash_key(USER), "tenant": "team-a", "name": "user"},
    ]
    return document


class Served:
    """A gateway whose policy file the test rewrites; its poller is parked, so the file is read when
    the admin API says so (a poll racing the call would leave the call nothing to change)."""

    def __init__(self, tmp_path: Path, upstream: FakeUpstream) -> None:
        self.upstream = upstream
        self.policy_path = write_policy(tmp_path / "policy.yaml", _policy(upstream.base_url))
        self.audit_path = tmp_path / "audit.jsonl"
        self.server = GatewayServer(
            self.policy_path, settings={"audit_file": str(self.audit_path), "reload_interval_s": 3600}
        ).start()

    def call(self, method: str, path: str, key: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.request(method, self.server.url + path, headers=headers, timeout=10, **kwargs)

    def chat(self, model: str) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return self.call("POST", "/v1/chat/completions", USER, json=body)

    def entries(self, count: int) -> list[dict[str, Any]]:
        """The audit trail once it holds ``count`` entries (each is written just after its answer)."""
        found: list[dict[str, Any]] = []

        def written() -> bool:
            nonlocal found
            text = self.audit_path.read_text() if self.audit_path.exists() else ""
            found = [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
            return len(found) >= count

        _wait_for(written)
        return found


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def served(tmp_path: Path, upstream: FakeUpstream) -> Iterator[Served]:
    gateway = Served(tmp_path, upstream)
    yield gateway
    gateway.server.stop()


def test_an_operator_reloads_a_changed_policy_and_the_new_pool_serves(served: Served) -> None:
    assert served.chat("medium").status_code == 404
    write_policy(served.policy_path, _policy(served.upstream.base_url, "medium"))
    answer = served.call("POST", "/v1/admin/policy/reload", OPERATOR)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["adopted"] is True and body["process"] and body["loaded_at"] <= time.time()
    assert body["changed"] == {
        "sections": ["pools"],
        "pools": {"added": ["medium"], "removed": [], "changed": []},
    }
    view = served.call("GET", "/v1/admin/policy", VIEWER).json()
    assert "medium" in view["policy"]["pools"] and view["loaded_at"] == body["loaded_at"]
    assert served.chat("medium").status_code == 200
    (entry,) = served.entries(1)
    assert (entry["actor"], entry["tenant"], entry["client"]) == ("ops-operator", "ops", "127.0.0.1")
    assert (entry["action"], entry["outcome"], entry["target"]) == (
        "policy.reload",
        "ok",
        str(served.policy_path),
    )
    assert entry["details"]["pools"]["added"] == ["medium"] and entry["details"]["process"] == body["process"]


def test_an_invalid_file_is_refused_and_the_old_policy_keeps_serving(served: Served) -> None:
    served.policy_path.write_text("pools: {small: {replicas: []}}\nkeys: 7\n")
    answer = served.call("POST", "/v1/admin/policy/reload", OPERATOR)
    assert answer.status_code == 422
    assert answer.json() == {
        "error": {
            "message": answer.json()["error"]["message"],
            "type": "invalid_request_error",
            "param": None,
            "code": "policy_invalid",
        }
    }
    view = served.call("GET", "/v1/admin/policy", OPERATOR).json()
    assert view["num_refused"] == 1 and view["last_error"] in answer.json()["error"]["message"]
    assert list(view["policy"]["pools"]) == ["small"]
    assert served.chat("small").status_code == 200
    (entry,) = served.entries(1)
    assert (entry["actor"], entry["action"], entry["outcome"], entry["status"]) == (
        "ops-operator",
        "policy.reload",
        "refused",
        422,
    )


def test_a_viewer_may_see_who_it_is_but_not_reload_or_drain(served: Served) -> None:
    me = served.call("GET", "/v1/admin/whoami", VIEWER)
    assert me.status_code == 200 and me.json()["name"] == "ops-viewer" and me.json()["role"] == "viewer"
    assert "session.read" in me.json()["actions"] and "policy.reload" not in me.json()["actions"]
    calls = [("POST", "/v1/admin/policy/reload"), ("POST", "/v1/admin/drain"), ("DELETE", "/v1/admin/drain")]
    for method, path in calls:
        refused = served.call(method, path, VIEWER)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_role"
    assert served.call("GET", "/readyz", None).json()["status"] != "draining"
    assert served.call("POST", "/v1/admin/drain", USER).json()["error"]["code"] == "admin_key_required"
    assert served.call("POST", "/v1/admin/drain", None).status_code == 401
    actions = [(e["actor"], e["action"], e["status"]) for e in served.entries(5)]
    assert actions == [
        ("ops-viewer", "policy.reload", 403),
        ("ops-viewer", "drain", 403),
        ("ops-viewer", "drain.cancel", 403),
        ("user", "drain", 403),
        ("-", "drain", 401),
    ]


def test_a_drain_fails_readiness_and_delete_brings_it_back(
    served: Served, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    _wait_for(lambda: served.call("GET", "/readyz", None).status_code == 200)
    drained = served.call("POST", "/v1/admin/drain", OPERATOR)
    assert drained.status_code == 200 and drained.json()["draining"] is True
    assert drained.json()["in_flight"] == 0 and drained.json()["process"]
    ready = served.call("GET", "/readyz", None)
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert served.chat("small").status_code == 200  # still serving what comes
    undone = served.call("DELETE", "/v1/admin/drain", OPERATOR)
    assert undone.status_code == 200 and undone.json()["draining"] is False
    assert served.call("GET", "/readyz", None).status_code == 200
    served.entries(2)
    assert cli(["audit", "verify", "--file", str(served.audit_path)]) == 0
    capsysbinary.readouterr()
    assert cli(["audit", "export", "--file", str(served.audit_path)]) == 0
    exported = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert [(e["actor"], e["tenant"], e["client"], e["action"], e["target"]) for e in exported] == [
        ("ops-operator", "ops", "127.0.0.1", "drain", drained.json()["process"]),
        ("ops-operator", "ops", "127.0.0.1", "drain.cancel", drained.json()["process"]),
    ]
