"""Hash slots: CRC16 and hash tags as Redis Cluster computes them, and every store script call's keys
in one slot."""

from __future__ import annotations

import pytest

from gateway.redis_client.slots import CrossSlotError, command_keys, key_slot, slot_of_keys
from gateway.stores import LimitRule
from gateway.stores.key_layouts import KeyLayouts
from gateway.stores.key_names import KeySpace


def test_slots_match_redis() -> None:
    assert key_slot("123456789") == 0x31C3 % 16384  # the spec's CRC16 check value
    assert key_slot("foo") == 12182  # CLUSTER KEYSLOT foo
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == key_slot("user1000")
    assert key_slot("foo{}{bar}") == key_slot(b"foo{}{bar}")  # an empty tag: the whole key is hashed
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")


def test_command_keys_for_what_the_gateway_sends() -> None:
    assert command_keys(("EVALSHA", "sha", 2, "k1", "k2", "argv")) == ("k1", "k2")
    assert command_keys(("MGET", "a", "b")) == ("a", "b")
    assert command_keys(("SET", "a", "v", "PX", 5)) == ("a",)
    assert command_keys(("SCRIPT", "LOAD", "return 1")) == ()
    assert command_keys((b"PING",)) == ()


def test_keys_in_two_slots_are_refused() -> None:
    assert slot_of_keys(["sy:{t:a}:rpm:x", "sy:{t:a}:usage:2026-11"]) == key_slot("t:a")
    with pytest.raises(CrossSlotError):
        slot_of_keys(["sy:{t:a}:rpm:x", "sy:{t:b}:rpm:x"])


@pytest.mark.parametrize("tenant", ["acme", "we{ird}", "%7B", "", "a}b{c"])
def test_every_script_call_of_the_store_names_keys_of_one_slot(tenant: str) -> None:
    keys = KeySpace()
    layouts = KeyLayouts(keys)
    rules = (
        LimitRule(scope="key:k1", requests_per_minute=5, tokens_per_minute=100, max_concurrent=2),
        LimitRule(scope="tenant", requests_per_minute=50, max_concurrent=10),
        LimitRule(scope="pool:{fast}", tokens_per_minute=1000),
    )
    admit_keys, _ = layouts.admit(tenant, "2026-11", rules)
    rule_keys, _, _ = layouts.settle(tenant, "2026-11", rules)
    flush_keys = [keys.written(tenant, 0.0), keys.usage(tenant, "2026-11")]  # and the windows, leases:
    flush_keys += [f(tenant, rule.scope) for rule in rules for f in (keys.requests, keys.tokens, keys.leases)]
    settle_keys = [keys.settled(tenant, 0.0), *rule_keys]
    slot = key_slot(f"t:{keys.tenant(tenant).split('{t:', 1)[1].rstrip('}')}")
    for call in (admit_keys, settle_keys, flush_keys):
        assert len(call) > 1
        assert slot_of_keys(call) == slot
