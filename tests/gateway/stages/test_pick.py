"""Replica choice: the pool's replicas, its fallbacks, per-tenant cache salts, prefix affinity, and a
saturated pool's fair queue (status codes, budget, retries, tickets)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.cache import MemoryAffinityMap
from gateway.compiled import CompiledPolicy
from gateway.errors import RateLimited, ServiceUnavailable
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.config import QueueConfig
from gateway.replicas.slot_queue import SlotQueues, Ticket
from gateway.stages.pick import PickReplica
from tests.support.calls import (
    USER_HI,
    api_key,
    balancer_for,
    build_call,
    compile_doc,
    policy_doc,
    replica_of,
)

SALTED = {
    "small": {
        "replicas": [
            {"base_url": "http://small-0.test/v1", "model": "m", "name": "small-0", "send_cache_salt": True}
        ]
    }
}
SECRET = {"SORTYARD_CACHE_SALT_SECRET": "s3cret"}


async def test_the_call_gets_a_replica_of_its_pool() -> None:
    compiled = compile_doc(policy_doc("small", "large"))
    call = build_call(compiled, {"model": "large", "messages": USER_HI})
    await PickReplica(balancer_for(compiled))(call)
    assert call.replica is not None and call.replica.label == "large-0"
    assert "x-sortyard-fallback-pool" not in call.response_headers


async def test_a_pool_that_cannot_serve_falls_back_and_says_so() -> None:
    compiled = compile_doc(
        policy_doc("small", "large", routing={"pools": {"large": {"fallbacks": ["small"]}}})
    )
    balancer = balancer_for(compiled)
    balancer.replicas("large")[0].breaker.trip(balancer.clock())
    call = build_call(compiled, {"model": "large", "messages": USER_HI})
    await PickReplica(balancer)(call)
    assert call.replica is not None and call.replica.pool == "small"
    assert call.response_headers["x-sortyard-fallback-pool"] == "small"


async def test_no_replica_left_is_503_no_healthy_replica() -> None:
    compiled = compile_doc(policy_doc())
    balancer = balancer_for(compiled)
    call = build_call(compiled)
    with pytest.raises(ServiceUnavailable) as raised:
        await PickReplica(balancer)(call, exclude=tuple(balancer.replicas("small")))
    assert raised.value.code == "no_healthy_replica" and raised.value.headers == {"Retry-After": "1"}


async def test_salted_replicas_get_one_salt_per_tenant_and_others_none() -> None:
    compiled = compile_doc(policy_doc(pools=SALTED))
    pick = PickReplica(balancer_for(compiled), environ=SECRET)
    salts = []
    for tenant in ("acme", "acme", "globex"):
        call = build_call(compiled, tenant=tenant)
        await pick(call)
        salts.append(call.body["cache_salt"])
    assert salts[0] == salts[1] != salts[2]
    plain = compile_doc(policy_doc())
    call = build_call(plain, {"model": "small", "messages": USER_HI, "cache_salt": "from-a-retry"})
    await PickReplica(balancer_for(plain), environ=SECRET)(call)
    assert "cache_salt" not in call.body  # a replica that takes none never gets one


async def test_a_shared_prefix_returns_to_the_replica_that_served_it() -> None:
    compiled = compile_doc(policy_doc(num_replicas=2, cache={"affinity": {"chunk_bytes": 16}}))
    events: list[str] = []
    pick = PickReplica(balancer_for(compiled), MemoryAffinityMap(), on_event=events.append)
    system = {"role": "system", "content": "You are a careful assistant. " * 8}
    labels = []
    for question in ("first?", "second?", "third?"):
        call = build_call(
            compiled, {"model": "small", "messages": [system, {"role": "user", "content": question}]}
        )
        await pick(call)
        assert call.replica is not None
        labels.append(call.replica.label)
        await call.finish()  # records the prefix -> replica mapping
    assert labels[0] == labels[1] == labels[2]  # round robin alone would alternate
    assert events == ["affinity_miss", "affinity_hit", "affinity_hit"]


QUEUED_POOL = {"pools": {"small": {"max_outstanding_per_replica": 1, "queue": {"max_queued_per_tenant": 1}}}}


class RecordingQueues(SlotQueues):
    """The real queues, remembering each ticket they were given."""

    def __init__(self, balancer: Balancer) -> None:
        super().__init__(balancer)
        self.tickets: list[Ticket] = []

    async def take(
        self,
        pool: str,
        ticket: Ticket,
        config: QueueConfig,
        timeout_s: float,
        *,
        prefer: str | None = None,
        origin: str | None = None,
    ) -> ReplicaState | None:
        self.tickets.append(ticket)
        return await super().take(pool, ticket, config, timeout_s, prefer=prefer, origin=origin)


def queued_policy(**sections: Any) -> CompiledPolicy:
    return compile_doc(policy_doc(routing=QUEUED_POOL, **sections))


async def test_a_saturated_queued_pool_refuses_a_tenant_whose_queue_is_full() -> None:
    compiled = queued_policy()
    balancer = balancer_for(compiled)
    pick = PickReplica(balancer)
    replica_of(balancer, "small").acquire()  # the one slot is taken
    waiting = asyncio.create_task(pick(build_call(compiled, tenant="acme")))
    for _ in range(100):  # let it reach the queue
        if pick.queues.queue("small").waiting:
            break
        await asyncio.sleep(0)
    with pytest.raises(RateLimited) as raised:
        await pick(build_call(compiled, tenant="acme"))
    assert raised.value.status == 429 and raised.value.code == "queue_full"
    assert raised.value.headers == {"Retry-After": "1"}
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pick.queues.queue("small").is_idle


async def test_waiting_spends_the_total_budget_and_ends_in_503_pool_saturated() -> None:
    compiled = queued_policy(timeouts={"total_s": 5})
    balancer = balancer_for(compiled)
    replica_of(balancer, "small").acquire()
    call = build_call(compiled, tenant="acme")
    call.started_at -= 5  # its deadline has come: no time left to wait
    with pytest.raises(ServiceUnavailable) as raised:
        await PickReplica(balancer)(call)
    assert raised.value.status == 503 and raised.value.code == "pool_saturated"
    assert raised.value.headers == {"Retry-After": "1"}


async def test_a_retry_never_waits_and_a_pool_without_a_queue_serves_when_saturated() -> None:
    for compiled in (queued_policy(), compile_doc(policy_doc())):
        balancer = balancer_for(compiled)
        replica_of(balancer, "small").outstanding = 5
        call = build_call(compiled)
        call.attempts = 2 if compiled.policy.routing.pools else 1
        await PickReplica(balancer)(call)
        assert call.replica is replica_of(balancer, "small")  # busy, but it serves


async def test_the_ticket_carries_the_policy_priority_and_tenant_weight() -> None:
    urgent, urgent_stanza = api_key("acme", priority=1, allow_client_priority=True)
    plain, plain_stanza = api_key("globex")
    compiled = queued_policy(
        keys=[urgent_stanza, plain_stanza], tenants={"acme": {"priority": 3, "weight": 2.5}}
    )
    balancer = balancer_for(compiled)
    queues = RecordingQueues(balancer)
    pick = PickReplica(balancer, queues=queues)
    for key, body_priority in ((urgent, None), (urgent, 7), (urgent, -9), (plain, None)):
        body: dict[str, Any] = {"model": "small", "messages": USER_HI}
        if body_priority is not None:
            body["priority"] = body_priority
        await pick(build_call(compiled, body, key=key))
    assert queues.tickets == [
        Ticket("acme", 1, 2.5),  # the key's priority over its tenant's
        Ticket("acme", 7, 2.5),  # a client may ask for a later class ...
        Ticket("acme", 1, 2.5),  # ... never an earlier one
        Ticket("globex", 0, 1.0),  # no priority: class 0; no tenant entry: weight 1
    ]
