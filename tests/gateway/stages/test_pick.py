"""Replica choice: the pool's replicas, its fallbacks, per-tenant cache salts and prefix affinity."""

from __future__ import annotations

import pytest

from gateway.cache import MemoryAffinityMap
from gateway.errors import ServiceUnavailable
from gateway.stages.pick import PickReplica
from tests.support.calls import USER_HI, balancer_for, build_call, compile_doc, policy_doc

SALTED = {
    "small": {
        "replicas": [
            {"base_url": "http://small-0.test/v1", "model": "m", "name": "small-0", "send_cache_salt": True}
        ]
    }
}
SECRET = {"SWITCHYARD_CACHE_SALT_SECRET": "s3cret"}


async def test_the_call_gets_a_replica_of_its_pool() -> None:
    compiled = compile_doc(policy_doc("small", "large"))
    call = build_call(compiled, {"model": "large", "messages": USER_HI})
    await PickReplica(balancer_for(compiled))(call)
    assert call.replica is not None and call.replica.label == "large-0"
    assert "x-switchyard-fallback-pool" not in call.response_headers


async def test_a_pool_that_cannot_serve_falls_back_and_says_so() -> None:
    compiled = compile_doc(
        policy_doc("small", "large", routing={"pools": {"large": {"fallbacks": ["small"]}}})
    )
    balancer = balancer_for(compiled)
    balancer.replicas("large")[0].breaker.trip(balancer.clock())
    call = build_call(compiled, {"model": "large", "messages": USER_HI})
    await PickReplica(balancer)(call)
    assert call.replica is not None and call.replica.pool == "small"
    assert call.response_headers["x-switchyard-fallback-pool"] == "small"


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
