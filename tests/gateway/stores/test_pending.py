"""PendingWrites: settles and renewals summed per tenant, turned into one flush.lua call under a write id."""

from __future__ import annotations

import json

from gateway.stores.key_names import KeySpace
from gateway.stores.pending import PendingWrites


def test_usage_is_summed_and_spread_over_tenant_key_and_pool() -> None:
    pending = PendingWrites()
    pending.add_usage("2026-11", "k1", "gpu", 10, 2, 0.25)
    pending.add_usage("2026-11", "k1", "gpu", 5, 1, 0.5)
    pending.add_adjust("sy:{t:acme}:tpm:tenant", 100, -30)
    pending.add_adjust("sy:{t:acme}:tpm:tenant", 100, 5)
    pending.add_release("sy:{t:acme}:conc:pool:gpu", ["r1", "r2"])
    keys, spec = pending.spec("acme", KeySpace(), 3600, now_s=120.5, write_id="w1")
    document = json.loads(spec)
    assert keys == [
        "sy:{t:acme}:written:2",  # the ids applied in minute 2 (a write sent again is skipped)
        "sy:{t:acme}:usage:2026-11",
        "sy:{t:acme}:tpm:tenant",
        "sy:{t:acme}:conc:pool:gpu",
    ]
    assert (document["id"], document["now"]) == ("w1", 120.5)
    [[ledger, ints, floats]] = document["ledgers"]
    assert ledger == 2
    assert ints["tenant|requests"] == ints["key:k1|requests"] == ints["pool:gpu|requests"] == 2
    assert ints["key:k1|input_tokens"] == 15 and ints["pool:gpu|output_tokens"] == 3
    assert floats["tenant|cost_usd"] == "0.75"  # a string: HINCRBYFLOAT gets every digit
    assert document["adjust"] == [[3, 100, -25]]
    assert document["release"] == [[4, "r1", "r2"]]
    assert document["renew"] == []


def test_renewals_keep_the_latest_expiry_of_each_member() -> None:
    pending = PendingWrites()
    assert pending.empty()
    pending.add_renew("sy:{t:acme}:conc:tenant", {"r1": 130.0, "r2": 140.0})
    pending.add_renew("sy:{t:acme}:conc:tenant", {"r1": 125.0, "r3": 150.0})
    assert not pending.empty()
    _, spec = pending.spec("acme", KeySpace(), 3600, now_s=120.0, write_id="w2")
    assert json.loads(spec)["renew"] == [[2, "r1", 130.0, "r2", 140.0, "r3", 150.0]]
