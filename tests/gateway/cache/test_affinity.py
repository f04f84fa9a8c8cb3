"""Prefix chain hashing, the shared affinity map (memory and a real Redis), replica choice, salts."""

from __future__ import annotations

import pytest

from gateway.cache import (
    BlobAffinityMap,
    CacheKeys,
    RedisAffinityMap,
    cache_salt,
    choose_replica,
    prefix_chain,
)
from tests.gateway.cache.conftest import Backend

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 200}  # ~5.8 kB: 5 chunks


def chat(*messages: dict[str, str], **extra: object) -> dict[str, object]:
    return {"model": "small", "messages": list(messages), **extra}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_shared_leading_content_shares_the_chain() -> None:
    a = prefix_chain(chat(SYSTEM, user("What is 2+2?" * 100)))
    b = prefix_chain(chat(SYSTEM, user("Name a colour." * 100)))
    common = len(SYSTEM["content"]) // 1024
    assert a[:common] == b[:common]
    assert a[common + 1 :] != b[common + 1 :]
    assert len(a) == len(set(a))  # chained: equal chunks at different places hash apart


def test_the_next_turn_extends_the_previous_chain() -> None:
    first = chat(SYSTEM, user("Tell me about Paris." * 40))
    second = chat(*first["messages"], {"role": "assistant", "content": "Paris is..." * 50}, user("And Rome?"))  # type: ignore[misc]
    one, two = prefix_chain(first), prefix_chain(second)
    assert len(two) > len(one) and two[: len(one)] == one


def test_field_order_and_sampling_do_not_change_the_chain() -> None:
    reordered = {"content": SYSTEM["content"], "role": "system"}
    assert prefix_chain(chat(SYSTEM, user("hi"))) == prefix_chain(
        chat(reordered, user("hi"), temperature=0.3)
    )


def test_tools_come_first_in_the_chain() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 2000}}]
    assert prefix_chain(chat(SYSTEM, tools=tools))[0] != prefix_chain(chat(SYSTEM))[0]


def test_short_prompts_and_limits() -> None:
    assert prefix_chain(chat(user("hi"))) == []
    assert len(prefix_chain(chat(SYSTEM), chunk_bytes=64, max_chunks=10)) == 10
    assert len(prefix_chain({"model": "m", "prompt": "x" * 4096})) == 4


async def test_lookup_finds_the_longest_recorded_prefix(backend: Backend) -> None:
    amap = BlobAffinityMap(backend.blobs())
    chain = prefix_chain(chat(SYSTEM, user("question " * 300)))
    assert len(chain) >= 6
    assert await amap.lookup("acme", "small", chain) == (None, 0)
    await amap.record("acme", "small", chain[:3], "replica-a", ttl_s=60)
    await amap.record("acme", "small", chain[:5], "replica-b", ttl_s=60)
    assert await amap.lookup("acme", "small", chain) == ("replica-b", 5)
    assert await amap.lookup("acme", "small", chain[:2]) == ("replica-b", 2)  # b re-recorded 0..4
    other = prefix_chain(chat(SYSTEM, user("something else " * 300)))
    assert (await amap.lookup("acme", "small", other))[0] == "replica-b"
    assert await amap.lookup("acme", "small", []) == (None, 0)


async def test_the_map_is_per_tenant_and_per_pool(backend: Backend) -> None:
    amap = BlobAffinityMap(backend.blobs())
    chain = prefix_chain(chat(SYSTEM))
    await amap.record("acme", "small", chain, "replica-a", ttl_s=60)
    assert await amap.lookup("globex", "small", chain) == (None, 0)
    assert await amap.lookup("acme", "large", chain) == (None, 0)


async def test_mappings_expire(backend: Backend) -> None:
    amap = BlobAffinityMap(backend.blobs())
    chain = prefix_chain(chat(SYSTEM))
    await amap.record("acme", "small", chain, "replica-a", ttl_s=60)
    await backend.advance(59)
    assert (await amap.lookup("acme", "small", chain))[0] == "replica-a"
    await backend.advance(1)
    assert await amap.lookup("acme", "small", chain) == (None, 0)


async def test_two_gateway_replicas_share_the_map(redis_flushed: str) -> None:
    one, two = RedisAffinityMap(redis_flushed, timeout_s=2.0), RedisAffinityMap(redis_flushed, timeout_s=2.0)
    chain = prefix_chain(chat(SYSTEM))
    await one.record("acme", "small", chain, "replica-c", ttl_s=60)
    assert await two.lookup("acme", "small", chain) == ("replica-c", len(chain))
    keys = CacheKeys().affinity("acme", "small", chain)
    assert all(k.startswith("sy:{t:acme}:pa:small:") for k in keys)  # one hash tag: one MGET
    await one.close()
    await two.close()


@pytest.mark.parametrize(
    ("loads", "preferred", "expected"),
    [
        ([("a", 0), ("b", 0)], "b", ("b", "affinity")),
        ([("a", 1), ("b", 0)], "a", ("a", "affinity")),  # one request in flight never overrides
        ([("a", 3), ("b", 3), ("c", 3)], "c", ("c", "affinity")),
        ([("a", 8), ("b", 2), ("c", 2)], "a", ("b", "override")),  # 8 > 4 * 1.5: least loaded wins
        ([("a", 5), ("b", 3), ("c", 4)], "a", ("a", "affinity")),  # 5 <= 4 * 1.5
        ([("a", 2), ("b", 0)], "a", ("b", "override")),
        ([("a", 2), ("b", 1)], None, ("b", "no_affinity")),
        ([("a", 2), ("b", 1)], "gone", ("b", "no_affinity")),  # its replica left the pool
        ([("a", 0), ("b", 0)], None, ("a", "no_affinity")),  # ties: the first candidate
    ],
)
def test_choose_replica(
    loads: list[tuple[str, float]], preferred: str | None, expected: tuple[str, str]
) -> None:
    assert choose_replica(loads, preferred, max_load_factor=1.5) == expected


def test_choose_replica_needs_candidates() -> None:
    with pytest.raises(ValueError):
        choose_replica([], "a", 1.5)


def test_cache_salt_is_per_tenant_stable_and_keyed() -> None:
    salt = cache_salt("acme", "s3cret")
    assert salt == cache_salt("acme", b"s3cret") and len(salt) == 32
    assert salt != cache_salt("globex", "s3cret")
    assert salt != cache_salt("acme", "other secret")
    assert "acme" not in salt


def test_a_responses_conversation_extends_its_chain_as_chat_does() -> None:
    turn = [{"role": "user", "content": "Tell me about Paris." * 60}]
    first = {"model": "small", "instructions": SYSTEM["content"], "input": turn}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Paris." * 80}],
    }
    second = {**first, "input": [*turn, answer, {"role": "user", "content": "And Rome?"}]}
    one, two = prefix_chain(first), prefix_chain(second)
    assert len(one) >= 5 and two[: len(one)] == one
    assert prefix_chain({**first, "instructions": "Other."})[:1] != one[:1]
