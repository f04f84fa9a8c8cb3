"""gateway/replicas/pools.py: a replica's ``responses`` mode (native or over chat) and its kind's default."""

from __future__ import annotations

import msgspec
import pytest

from gateway.replicas.pools import Replica, is_gateway_path


@pytest.mark.parametrize(
    ("kind", "native"),
    [
        ("openai", True),
        ("vllm", True),
        ("sortyard", False),
        ("tgi", False),
        ("triton", False),
        ("ollama", False),
        ("llamacpp", False),
    ],
)
def test_each_kind_has_a_default(kind: str, native: bool) -> None:
    replica = msgspec.convert({"base_url": "http://h/v1", "model": "m", "kind": kind}, Replica)
    assert replica.serves_responses is native


def test_the_field_overrides_the_kind() -> None:
    assert not Replica("http://h/v1", "m", kind="vllm", responses="chat").serves_responses
    assert Replica("http://h/v1", "m", kind="llamacpp", responses="native").serves_responses


@pytest.mark.parametrize("kind", ["tgi", "triton", "ollama", "sortyard"])
def test_native_is_refused_where_the_server_has_no_responses_route(kind: str) -> None:
    with pytest.raises(msgspec.ValidationError, match="responses"):
        msgspec.convert(
            {"base_url": "http://h/v1", "model": "m", "kind": kind, "responses": "native"}, Replica
        )


def test_the_stored_responses_routes_are_the_gateways() -> None:
    assert is_gateway_path("/v1/responses/resp_1") and is_gateway_path("/v1/responses/resp_1/input_items")
