"""The trail stamps and appends; through the app, admin calls (made or refused) land on it, never a secret."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from gateway.app import create_app
from gateway.audit import AuditTrail, Entry, Event, FileAuditStore, verify
from gateway.audit.store import AuditStoreError
from gateway.keys.hashing import hash_key, new_key
from gateway.policy import parse_policy
from gateway.proxy import ProxyApp
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.settings import Settings

ROOT, USER = new_key(), new_key()


async def _entries(trail: AuditTrail) -> list[Entry]:
    lines = await trail.store.lines()
    assert verify(lines).is_intact
    return [msgspec.json.decode(line, type=Entry) for line in lines]


async def test_an_event_is_stamped_by_the_clock_and_refused_from_status_400() -> None:
    trail = AuditTrail(FileAuditStore(None), clock=lambda: 42.0)
    ok = await trail.record("root", "key.create", "ci", tenant="ops", client="10.0.0.1")
    refused = await trail.record("-", "admin.read", "/v1/admin/pools", status=401)
    assert ok is not None and (ok.at, ok.outcome, ok.status, ok.client) == (42.0, "ok", 200, "10.0.0.1")
    assert refused is not None and (refused.outcome, refused.seq) == ("refused", 1)


class _Broken(FileAuditStore):
    async def append(self, event: Event) -> Entry:
        raise AuditStoreError("torn")


async def test_a_store_failure_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    assert await AuditTrail(_Broken(None)).record("root", "drain") is None
    assert "audit entry not written" in caplog.text


async def test_record_soon_is_written_by_flush() -> None:
    trail = AuditTrail(FileAuditStore(None))
    trail.record_soon("system", "policy.reload", "policy.yaml")
    await trail.flush()
    assert [e.action for e in await _entries(trail)] == ["policy.reload"]


def _app() -> tuple[ProxyApp, AuditTrail]:
    document = {
        "pools": {"small": {"replicas": [{"base_url": "http://engine:8000/v1", "model": "m"}]}},
        "auth": {"required": True},
        "keys": [
            {"sha256": hash_key(ROOT), "tenant": "ops", "name": "root", "admin": True},
            {"sha256": hash_key(USER), "tenant": "team-a", "name": "user"},
        ],
    }
    reloader = PolicyReloader("unused.yaml", policy=parse_policy(document, "test"))
    upstream = MemoryUpstreamClient(lambda url, body, headers: Reply.json({}))
    trail = AuditTrail(FileAuditStore(None), clock=lambda: 1000.0)
    return create_app(Settings(), client=upstream, reloader=reloader, audit=trail), trail


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[httpx.AsyncClient, AuditTrail]]:
    app, trail = _app()
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        yield client, trail


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_refused_admin_calls_are_recorded_without_the_secret(
    gateway: tuple[httpx.AsyncClient, AuditTrail],
) -> None:
    client, trail = gateway
    bad = "sk-sy-" + "x" * 40
    assert (await client.post("/v1/admin/keys", json={"tenant": "t"}, headers=_as(USER))).status_code == 403
    assert (await client.get("/v1/admin/pools", headers=_as(bad))).status_code == 401
    entries = await _entries(trail)
    assert [(e.actor, e.tenant, e.action, e.outcome, e.status) for e in entries] == [
        ("user", "team-a", "key.create", "refused", 403),
        ("-", None, "admin.read", "refused", 401),
    ]
    assert entries[1].target == "/v1/admin/pools" and entries[0].client == "203.0.113.7"
    written = b"".join(await trail.store.lines())
    assert (
        bad.encode() not in written
        and USER.encode() not in written
        and hash_key(USER).encode() not in written
    )


async def test_key_changes_are_recorded_and_the_key_audit_still_answers(
    gateway: tuple[httpx.AsyncClient, AuditTrail],
) -> None:
    client, trail = gateway
    made = await client.post("/v1/admin/keys", json={"tenant": "team-b", "name": "ci"}, headers=_as(ROOT))
    assert made.status_code == 200
    await client.patch("/v1/admin/keys/ci", json={"admin": True}, headers=_as(ROOT))
    await client.post("/v1/admin/keys/ci/rotate", json={"grace_s": 0}, headers=_as(ROOT))
    await client.post("/v1/admin/keys/ci/revoke", headers=_as(ROOT))
    await client.get("/v1/admin/keys", headers=_as(ROOT))  # a served read: not recorded
    entries = await _entries(trail)
    assert [(e.action, e.target, e.actor, e.tenant, e.outcome) for e in entries] == [
        (action, "ci", "root", "ops", "ok")
        for action in ("key.create", "key.update", "key.rotate", "key.revoke")
    ]
    assert entries[1].details == {"admin": True} and entries[2].details == {"grace_s": 0.0}
    assert made.json()["key"].encode() not in b"".join(await trail.store.lines())
    audit: Any = (await client.get("/v1/admin/audit", headers=_as(ROOT))).json()
    assert [e["action"] for e in audit["data"]] == ["revoke", "rotate", "update", "create"]


async def test_repeated_refusals_are_written_once_a_window_and_counted() -> None:
    now = [0.0]
    trail = AuditTrail(FileAuditStore(None), clock=lambda: now[0], refusal_window_s=60.0)
    for _ in range(5):
        await trail.record_admin_call(None, "admin.read", "/v1/admin/pools", {}, "198.51.100.1", 401)
    await trail.record_admin_call(None, "admin.read", "/v1/admin/pools", {}, "198.51.100.2", 401)
    now[0] = 61.0
    await trail.record_admin_call(None, "admin.read", "/v1/admin/pools", {}, "198.51.100.1", 401)
    entries = await _entries(trail)
    assert [(e.client, e.details) for e in entries] == [
        ("198.51.100.1", {}),
        ("198.51.100.2", {}),
        ("198.51.100.1", {"suppressed": 4}),
    ]


async def test_a_drain_is_recorded_as_the_gateway_shuts_down() -> None:
    app, trail = _app()
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
    app.state.gateway.start_draining()  # what SIGTERM does
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 10)
    assert "lifespan.shutdown.complete" in sent
    assert [(e.actor, e.action) for e in await _entries(trail)] == [("system", "drain")]
