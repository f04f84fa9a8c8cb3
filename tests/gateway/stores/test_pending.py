"""PendingWrites: settles summed per tenant, turned into one flush.lua call, taken back on failure."""

from __future__ import annotations

import json

from gateway.stores.keys import KeySpace
from gateway.stores.pending import PendingWrites


def test_usage_is_summed_and_spread_over_tenant_key_and_pool() -> None:
    pending = PendingWrites()
    pending.add_usage("2026-11", "k1", "gpu", 10, 2, 0.25)
    pending.add_usage("2026-11", "k1", "gpu", 5, 1, 0.5)
    pending.add_adjust("sy:{t:acme}:tpm:tenant", 100, -30)
    pending.add_adjust("sy:{t:acme}:tpm:tenant", 100, 5)
    pending.add_release("sy:{t:acme}:conc:pool:gpu", ["r1", "r2"])
    keys, spec = pending.spec("acme", KeySpace(), 3600)
    document = json.loads(spec)
    assert keys == ["sy:{t:acme}:usage:2026-11", "sy:{t:acme}:tpm:tenant", "sy:{t:acme}:conc:pool:gpu"]
    [[ledger, ints, floats]] = document["ledgers"]
    assert ledger == 1
    assert ints["tenant|requests"] == ints["key:k1|requests"] == ints["pool:gpu|requests"] == 2
    assert ints["key:k1|input_tokens"] == 15 and ints["pool:gpu|output_tokens"] == 3
    assert floats["tenant|cost_usd"] == "0.75"  # a string: HINCRBYFLOAT gets every digit
    assert document["adjust"] == [[2, 100, -25]]
    assert document["release"] == [[3, "r1", "r2"]]


def test_merge_takes_a_failed_flush_back() -> None:
    failed, newer = PendingWrites(), PendingWrites()
    failed.add_usage("2026-11", "k1", "gpu", 10, 2, 0.25)
    failed.add_adjust("w", 7, -3)
    newer.add_usage("2026-11", "k1", "gpu", 1, 1, 0.25)
    newer.merge(failed)
    assert newer.usage[("2026-11", "k1", "gpu")] == [2, 11, 3, 0.5]
    assert newer.adjust == {("w", 7): -3}
    assert not newer.empty() and PendingWrites().empty()
