"""gateway/operations.py through the app (httpx over ASGI): whoami for every role, a reload by the API
(adopted, refused, not allowed) with its one audit entry naming the caller, and the admin drain."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import yaml

from gateway.app import create_app
from gateway.audit import AuditTrail, Entry, FileAuditStore, verify
from gateway.instance import Gateway
from gateway.keys.hashing import hash_key, new_key
from gateway.policy.schema import Role
from gateway.proxy import ProxyApp
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.roles import ACTIONS, ROLES, actions_of
from gateway.settings import Settings

KEYS = {name: new_key() for name in ("admin", "operator", "viewer", "tenant-admin", "plain")}
CLIENT = "203.0.113.7"


def _document(**extra_pools: str) -> dict[str, Any]:
    pools = {"small": "http://engine:8000/v1", **extra_pools}
    keys = [
        {"sha256": hash_key(secret), "tenant": "ops", "name": f"k-{name}"}
        | ({"role": name} if name != "plain" else {})
        for name, secret in KEYS.items()
    ]
    return {
        "pools": {name: {"replicas": [{"base_url": url, "model": "m"}]} for name, url in pools.items()},
        "auth": {"required": True},
        "keys": keys,
    }


class Harness(msgspec.Struct):
    client: httpx.AsyncClient
    app: ProxyApp
    trail: AuditTrail
    path: Path

    @property
    def gateway(self) -> Gateway:
        return self.app.gateway

    async def call(self, method: str, path: str, who: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {KEYS[who]}"} if who else {}
        return await self.client.request(method, path, headers=headers)

    async def entries(self) -> list[Entry]:
        await self.trail.flush()
        lines = await self.trail.store.lines()
        assert verify(lines).is_intact
        return [msgspec.json.decode(line, type=Entry) for line in lines]


def _build(path: Path) -> tuple[ProxyApp, AuditTrail]:
    path.write_text(yaml.safe_dump(_document()))
    reloader = PolicyReloader(path, overlay=path.with_suffix(".overlay"), poll_interval_s=3600)
    upstream = MemoryUpstreamClient(lambda url, body, headers: Reply.json({}))
    trail = AuditTrail(FileAuditStore(None), clock=lambda: 1000.0)
    return create_app(Settings(), client=upstream, reloader=reloader, audit=trail), trail


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    app, trail = _build(tmp_path / "policy.yaml")
    transport = httpx.ASGITransport(app=app, client=(CLIENT, 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        yield Harness(client, app, trail, tmp_path / "policy.yaml")


@pytest.mark.parametrize("role", ROLES)
async def test_whoami_names_the_caller_and_what_its_role_may_do(harness: Harness, role: Role) -> None:
    answer = await harness.call("GET", "/v1/admin/whoami", role)
    assert answer.status_code == 200
    assert answer.json() == {"name": f"k-{role}", "tenant": "ops", "role": role, "actions": actions_of(role)}
    assert "session.read" in answer.json()["actions"]
    assert answer.json()["actions"] == sorted(answer.json()["actions"])
    assert await harness.entries() == []  # a served read is not recorded


def test_the_actions_of_a_role_are_the_tables() -> None:
    assert actions_of("admin") == sorted(ACTIONS)
    assert {"policy.reload", "gateway.drain"} <= set(actions_of("operator"))
    assert not {"policy.reload", "gateway.drain", "keys.write"} & set(actions_of("viewer"))
    assert actions_of(None) == []


async def test_whoami_refuses_no_key_and_a_plain_one_and_records_both(harness: Harness) -> None:
    anonymous = await harness.call("GET", "/v1/admin/whoami", None)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
    plain = await harness.call("GET", "/v1/admin/whoami", "plain")
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "admin_key_required"
    assert [(e.actor, e.action, e.target, e.status) for e in await harness.entries()] == [
        ("-", "admin.read", "/v1/admin/whoami", 401),
        ("k-plain", "admin.read", "/v1/admin/whoami", 403),
    ]


async def test_an_operator_reloads_and_the_one_entry_names_it(harness: Harness) -> None:
    before = harness.gateway.reloader.loaded_at
    harness.path.write_text(yaml.safe_dump(_document(big="http://engine:8001/v1")))
    answer = await harness.call("POST", "/v1/admin/policy/reload", "operator")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["adopted"] is True and body["loaded_at"] >= before
    assert body["changed"] == {
        "sections": ["pools"],
        "pools": {"added": ["big"], "removed": [], "changed": []},
    }
    assert body["process"].endswith(":" + str(os.getpid()))
    assert set(harness.gateway.policy.pools) == {"small", "big"}
    (entry,) = await harness.entries()
    assert (entry.actor, entry.tenant, entry.client, entry.action, entry.outcome) == (
        "k-operator",
        "ops",
        CLIENT,
        "policy.reload",
        "ok",
    )
    assert entry.target == str(harness.path) and entry.details["pools"]["added"] == ["big"]
    # the next reload by file change is the gateway's own again
    harness.path.write_text(yaml.safe_dump(_document()))
    assert harness.gateway.reloader.reload()
    assert [e.actor for e in await harness.entries()] == ["k-operator", "system"]


async def test_an_invalid_file_is_refused_with_422_and_the_old_policy_serves(harness: Harness) -> None:
    harness.path.write_text("pools: [not, a, mapping]")
    answer = await harness.call("POST", "/v1/admin/policy/reload", "admin")
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "policy_invalid" and error["type"] == "invalid_request_error"
    assert "pools" in error["message"] and "last good one keeps serving" in error["message"]
    assert set(harness.gateway.policy.pools) == {"small"}
    (entry,) = await harness.entries()
    assert (entry.actor, entry.action, entry.outcome, entry.status) == (
        "k-admin",
        "policy.reload",
        "refused",
        422,
    )


@pytest.mark.parametrize("who", ["viewer", "tenant-admin"])
async def test_reload_and_drain_are_not_for_other_roles(harness: Harness, who: str) -> None:
    for method, path in (
        ("POST", "/v1/admin/policy/reload"),
        ("POST", "/v1/admin/drain"),
        ("DELETE", "/v1/admin/drain"),
    ):
        answer = await harness.call(method, path, who)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "insufficient_role"
        assert "needs the role admin or operator" in answer.json()["error"]["message"]
    assert not harness.gateway.is_draining
    refused = [(e.actor, e.action, e.status) for e in await harness.entries()]
    assert refused == [(f"k-{who}", action, 403) for action in ("policy.reload", "drain", "drain.cancel")]


async def test_a_drain_fails_readiness_until_it_is_undone(harness: Harness) -> None:
    drained = await harness.call("POST", "/v1/admin/drain", "operator")
    assert drained.status_code == 200
    assert drained.json() | {"process": "-"} == {"draining": True, "in_flight": 0, "process": "-"}
    assert harness.gateway.is_draining and harness.gateway.drain_source == "admin"
    ready = await harness.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert (await harness.call("GET", "/v1/admin/whoami", "viewer")).status_code == 200  # still serving
    undone = await harness.call("DELETE", "/v1/admin/drain", "admin")
    assert undone.status_code == 200 and undone.json()["draining"] is False
    assert not harness.gateway.is_draining
    assert (await harness.client.get("/readyz")).json()["status"] != "draining"
    again = await harness.call("DELETE", "/v1/admin/drain", "admin")  # not draining: a no-op
    assert again.status_code == 200 and again.json()["draining"] is False
    entries = await harness.entries()
    assert [(e.actor, e.action, e.tenant, e.client, e.status) for e in entries] == [
        ("k-operator", "drain", "ops", CLIENT, 200),
        ("k-admin", "drain.cancel", "ops", CLIENT, 200),
    ]
    assert entries[0].details == {"in_flight": 0} and entries[0].target == drained.json()["process"]


async def test_a_drain_sigterm_began_is_not_undone(harness: Harness) -> None:
    harness.gateway.start_draining()  # what SIGTERM does
    refused = await harness.call("DELETE", "/v1/admin/drain", "operator")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "shutting_down"
    assert harness.gateway.is_draining
    drained = await harness.call("POST", "/v1/admin/drain", "operator")  # already draining: stays so
    assert drained.status_code == 200 and harness.gateway.drain_source == "signal"
    assert [(e.action, e.outcome, e.status) for e in await harness.entries()] == [
        ("drain.cancel", "refused", 409),
        ("drain", "ok", 200),
    ]


def test_a_signal_after_an_admin_drain_makes_it_a_shutdown(harness: Harness) -> None:
    gateway = harness.gateway
    gateway.start_draining("admin")
    since = gateway.draining_since
    gateway.start_draining()
    assert (gateway.drain_source, gateway.draining_since) == ("signal", since)
    assert gateway.stop_draining() is False and gateway.is_draining


async def _run_lifespan(app: ProxyApp, between: Any) -> None:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[str] = []

    async def send(message: Any) -> None:
        sent.append(message["type"])

    await inbox.put({"type": "lifespan.startup"})
    scope: Any = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    lifespan = asyncio.create_task(app(scope, inbox.get, send))
    deadline = time.monotonic() + 10
    while "lifespan.startup.complete" not in sent:
        assert time.monotonic() < deadline and not lifespan.done(), sent
        await asyncio.sleep(0.01)
    between()
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 10)
    assert "lifespan.shutdown.complete" in sent


async def test_shutting_down_after_an_admin_drain_writes_no_system_drain(tmp_path: Path) -> None:
    app, trail = _build(tmp_path / "policy.yaml")
    await _run_lifespan(app, lambda: app.gateway.start_draining("admin"))
    assert await trail.store.lines() == []
