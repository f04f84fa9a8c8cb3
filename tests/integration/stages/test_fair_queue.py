"""A saturated pool's fair queue over real loopback HTTP: one tenant floods a one-slot pool and another
tenant's requests are still served between the flood's; a full tenant queue is 429 ``queue_full``; a
wait past ``max_wait_s`` is 503 ``pool_saturated``; a client that leaves while waiting leaves the queue.

The pool's one replica is the fake upstream's ``gated`` model, which answers only when the test opens
its gate, so the test (not the clock) decides when a slot frees; the test waits for conditions (the
upstream saw a request, the queue-depth metric reached N), never for a guessed time.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

ALPHA = new_key()
BETA = new_key()
MAX_QUEUED = 8
Setup = tuple[GatewayServer, FakeUpstream]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    gated = {"replicas": [{"base_url": upstream.base_url, "model": "gated"}], "timeouts": {"total_s": 60}}
    document["pools"] |= {"gated": gated, "brief": gated}
    one_slot = {"max_outstanding_per_replica": 1}
    document["routing"] = {
        "pools": {
            "gated": {**one_slot, "queue": {"max_wait_s": 60, "max_queued_per_tenant": MAX_QUEUED}},
            "brief": {**one_slot, "queue": {"max_wait_s": 0.2}},
        }
    }
    document["keys"] = [
        {"sha256": hash_key(ALPHA), "tenant": "alpha"},
        {"sha256": hash_key(BETA), "tenant": "beta"},
    ]
    document["cache"] = {"response": {"enabled": False}}
    gateway = GatewayServer(write_policy(tmp_path_factory.mktemp("queue") / "p.yaml", document)).start()
    yield gateway, upstream
    gateway.stop()
    upstream.stop()


def metric(gateway: GatewayServer, name: str, **labels: str) -> float:
    value = gateway.gateway.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


def depth(gateway: GatewayServer, tenant: str, pool: str = "gated") -> float:
    return metric(gateway, "sortyard_queue_depth", pool=pool, tenant=tenant)


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait for ``condition`` (a generous bound: only a broken gateway gets there)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def chat(
    client: httpx.AsyncClient, key: str, content: str, pool: str = "gated"
) -> asyncio.Task[httpx.Response]:
    body = {"model": pool, "messages": [{"role": "user", "content": content}]}
    headers = {"Authorization": f"Bearer {key}"}
    return asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=headers))


def served_order(upstream: FakeUpstream, since: int) -> list[str]:
    return [body["messages"][0]["content"] for body in upstream.requests[since:]]


async def test_a_flooding_tenant_does_not_starve_another(setup: Setup) -> None:
    gateway, upstream = setup
    since = len(upstream.requests)
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60, limits=limits) as client:
        tasks = {"a0": chat(client, ALPHA, "a0")}  # takes the one slot and holds it at the gate
        await until(lambda: len(upstream.requests) == since + 1)
        for i in range(1, MAX_QUEUED + 1):  # the flood: alpha's queue fills, one request at a time
            tasks[f"a{i}"] = chat(client, ALPHA, f"a{i}")
            await until(lambda i=i: depth(gateway, "alpha") == i)  # type: ignore[misc]
        refused = await chat(client, ALPHA, "one too many")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "queue_full"
        for i in range(1, 5):  # beta comes late, behind alpha's whole backlog
            tasks[f"b{i}"] = chat(client, BETA, f"b{i}")
            await until(lambda i=i: depth(gateway, "beta") == i)  # type: ignore[misc]
        upstream.open_gate(len(tasks))
        responses = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
    assert {name: r.status_code for name, r in responses.items()} == dict.fromkeys(tasks, 200)
    order = served_order(upstream, since)
    # one slot: the upstream saw the requests in the order the queue granted them
    assert order == ["a0", "b1", "a1", "b2", "a2", "b3", "a3", "b4", "a4", "a5", "a6", "a7", "a8"]
    assert max(order.index(f"b{i}") for i in range(1, 5)) < order.index("a4")  # before most of the flood
    assert depth(gateway, "alpha") == depth(gateway, "beta") == 0
    assert metric(gateway, "sortyard_queue_refused_total", pool="gated", tenant="alpha", reason="full") == 1
    assert metric(gateway, "sortyard_queue_wait_seconds_count", pool="gated", tenant="beta") == 4
    assert metric(gateway, "sortyard_queue_wait_seconds_count", pool="gated", tenant="alpha") == 9
    gateway.settle()
    assert all(state.outstanding == 0 for state in gateway.gateway.balancer.all_replicas())


async def test_a_wait_past_max_wait_s_is_503_pool_saturated(setup: Setup) -> None:
    gateway, upstream = setup
    since = len(upstream.requests)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        holder = chat(client, ALPHA, "holder", pool="brief")
        await until(lambda: len(upstream.requests) == since + 1)
        late = await chat(client, BETA, "late", pool="brief")  # the gate stays shut: it must time out
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"]["code"] == "pool_saturated"
        assert depth(gateway, "beta", pool="brief") == 0
        assert (
            metric(gateway, "sortyard_queue_refused_total", pool="brief", tenant="beta", reason="timeout")
            == 1
        )
        upstream.open_gate()
        assert (await holder).status_code == 200
    assert served_order(upstream, since) == ["holder"]


def _raw_chat(gateway: GatewayServer, key: str, content: str) -> socket.socket:
    """A request on its own socket: closing it is the client leaving, nothing else."""
    raw = json.dumps({"model": "gated", "messages": [{"role": "user", "content": content}]}).encode()
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    return sock


async def test_a_client_that_leaves_while_waiting_leaves_the_queue(setup: Setup) -> None:
    gateway, upstream = setup
    since = len(upstream.requests)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        holder = chat(client, ALPHA, "holder")
        await until(lambda: len(upstream.requests) == since + 1)
        leaver = _raw_chat(gateway, BETA, "leaver")
        await until(lambda: depth(gateway, "beta") == 1)
        leaver.close()
        await until(lambda: depth(gateway, "beta") == 0)
        upstream.open_gate(2)
        assert (await holder).status_code == 200
        after: Any = await chat(client, BETA, "after")  # the queue is empty: served at once
        assert after.status_code == 200
    assert served_order(upstream, since) == ["holder", "after"]  # the leaver never reached it
    gateway.settle()
    assert metric(gateway, "sortyard_requests_total", endpoint="chat", pool="gated", status="499") >= 1
