"""The endpoints beside the proxied API, served in-process (no server): readiness, models, usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.policy import parse_policy
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.settings import Settings
from gateway.stores import MemoryStore


class _DownStore(MemoryStore):
    """A store whose backend does not answer its ping (Redis away)."""

    async def ping(self) -> bool:
        return False


def _document(on_failure: str) -> dict[str, Any]:
    replica = {"base_url": "http://engine:8000/v1", "model": "m"}
    return {"pools": {"small": {"replicas": [replica]}}, "store": {"on_failure": on_failure}}


def _client(document: dict[str, Any], store: MemoryStore) -> httpx.AsyncClient:
    reloader = PolicyReloader("unused.yaml", policy=parse_policy(document, "test"))
    upstream = MemoryUpstreamClient(lambda url, body, headers: Reply.json({}))
    app = create_app(Settings(), client=upstream, reloader=reloader, store=store)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


@pytest.fixture
async def fail_open_with_store_down() -> AsyncIterator[httpx.AsyncClient]:
    async with _client(_document("fail_open"), _DownStore()) as client:
        yield client


async def test_ready_when_everything_answers() -> None:
    async with _client(_document("fail_open"), MemoryStore()) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "checks": {"policy": True, "store": True, "replica": True}}


async def test_fail_open_stays_ready_through_a_store_outage(
    fail_open_with_store_down: httpx.AsyncClient,
) -> None:
    """Its requests are served by the local limiter meanwhile: leaving the load balancer would take
    every gateway out at once."""
    answer = await fail_open_with_store_down.get("/readyz")
    assert answer.status_code == 200 and answer.json()["checks"]["store"] is False


async def test_fail_closed_is_not_ready_without_its_store() -> None:
    async with _client(_document("fail_closed"), _DownStore()) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json() == {
        "status": "not ready",
        "checks": {"policy": True, "store": False, "replica": True},
    }


async def test_models_lists_pools() -> None:
    document = {**_document("fail_open"), "auth": {"required": False}}
    async with _client(document, MemoryStore()) as client:
        answer = await client.get("/v1/models")
    assert answer.status_code == 200
    assert [m["id"] for m in answer.json()["data"]] == ["small"]


async def test_usage_needs_an_admin_key() -> None:
    async with _client(_document("fail_open"), MemoryStore()) as client:
        answer = await client.get("/v1/usage")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
