"""``kv_routing:`` is refused at load when the gateway could not follow or score it: an address zmq would
refuse once running, an infinite weight, a pool with no event sources, a pool with no chat prompts."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.policy import PolicyError, parse_policy
from gateway.policy.kv_events import endpoint_problem
from tests.support.calls import policy_doc


def kv(**pool: Any) -> dict[str, Any]:
    return {
        "pools": {"small": {"tokenizer": "t", "replicas": {"small-0": {"endpoint": "tcp://h:5557"}}, **pool}}
    }


def problems_of(document: dict[str, Any]) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(document, "test")
    return str(caught.value)


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://10.0.0.5:5557",
        "tcp://vllm-0:1",
        "tcp://[::1]:65535",
        "tcp://[fe80::1%eth0]:5557",
        "ipc:///run/kv",
        "inproc://kv",
    ],
)
def test_zeromq_addresses_to_connect_to_are_accepted(endpoint: str) -> None:
    assert endpoint_problem(endpoint) is None
    assert parse_policy(policy_doc(kv_routing=kv(replicas={"small-0": {"endpoint": endpoint}})), "test")


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("tcp://127.0.0.1:notaport", "expected tcp://HOST:PORT"),
        ("tcp://", "expected tcp://HOST:PORT"),
        ("tcp://h", "expected tcp://HOST:PORT"),
        ("tcp://h:0", "a port from 1 to 65535"),
        ("tcp://h:65536", "a port from 1 to 65535"),
        ("tcp://::1:5557", "IPv6 in brackets"),
        ("tcp://h:5557 ", "expected tcp://HOST:PORT"),
        ("tcp://127.0.0.1:*", "a `*` is what the engine binds"),
        ("ipc://", "expected ipc://PATH"),
        ("ipc://" + "/x" * 60, "at most 107 bytes"),
        ("inproc://", "expected inproc://NAME"),
        ("http://h:5557", "expected a tcp://, ipc:// or inproc:// address"),
    ],
)
def test_an_address_zmq_cannot_connect_to_is_refused(endpoint: str, problem: str) -> None:
    assert problem in (endpoint_problem(endpoint) or "")
    source = {"small-0": {"endpoint": "tcp://h:5557", "replay_endpoint": endpoint}}
    message = problems_of(policy_doc(kv_routing=kv(replicas=source)))
    assert message.startswith("test: kv_routing.pools.small.replicas.small-0.replay_endpoint: ")
    assert problem in message


@pytest.mark.parametrize(
    "field", ["load_tokens", "max_load_factor", "min_load_excess", "stale_after_s", "replay_timeout_s"]
)
def test_an_infinite_figure_is_refused(field: str) -> None:
    message = problems_of(policy_doc(kv_routing=kv(**{field: float("inf")})))
    assert message == f"test: kv_routing.pools.small.{field}: expected a finite number, got inf"


def test_a_pool_with_no_event_sources_is_refused_unless_off() -> None:
    message = problems_of(policy_doc(kv_routing=kv(replicas={})))
    assert message.startswith(
        "test: kv_routing.pools.small.replicas: expected at least one replica's event source"
    )
    assert parse_policy(policy_doc(kv_routing=kv(replicas={}, enabled=False)), "test")


def test_the_semantic_caches_embedding_pool_is_refused() -> None:
    document = policy_doc("small", "embed", cache={"semantic": {"enabled": True, "pool": "embed"}})
    document["kv_routing"] = {
        "pools": {"embed": {"tokenizer": "t", "replicas": {"embed-0": {"endpoint": "tcp://h:1"}}}}
    }
    message = problems_of(document)
    assert message == (
        "test: kv_routing.pools.embed: the semantic cache's embedding pool (cache.semantic.pool) "
        "has no chat prompts"
    )
    document["cache"] = {"semantic": {"enabled": False, "pool": "embed"}}
    assert parse_policy(document, "test")


def test_an_unknown_pool_is_refused_before_its_sources() -> None:
    message = problems_of(policy_doc(kv_routing={"pools": {"nope": {"tokenizer": "t", "replicas": {}}}}))
    assert message == "test: kv_routing.pools.nope: unknown pool (pools are small)"
