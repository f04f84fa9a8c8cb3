"""The JSON argument of admit.lua and settle.lua, and admit.lua's reply read back into a Decision."""

from __future__ import annotations

import json

from gateway.stores import BudgetRule, LimitRule
from gateway.stores.base import WINDOW_S
from gateway.stores.lua_codec import admit_spec, read_admit_reply, settle_spec
from tests.gateway.stores.conftest import T0, admission, settlement

RULES = (LimitRule(scope="key:k1", requests_per_minute=10), LimitRule(scope="pool:gpu", max_concurrent=2))
BUDGETS = (BudgetRule(scope="tenant", monthly_usd=5.0),)


def test_an_admit_spec_carries_the_admission_and_the_credit_wanted() -> None:
    adm = admission(*RULES, now_s=T0 + 0.25, reserve_tokens=40, budgets=BUDGETS, lease_ttl_s=120.0)
    checks = [(1, 1, 2, 10), (3, 2, 3, 2)]
    spec = json.loads(admit_spec(adm, checks, lease_expiry_s=30.0, want=(128, 5120, 8)))
    assert spec["now"] == T0 + 0.25 and spec["reserve"] == 40 and spec["id"] == adm.request_id
    assert spec["lease_ttl"] == 30.0  # renewed while it runs, never written for its whole bound
    assert spec["window"] == WINDOW_S
    assert spec["to_next_month"] > 0
    assert spec["checks"] == [list(check) for check in checks]
    assert spec["budgets"] == [["tenant", 5.0]]
    assert spec["want"] == [128, 5120, 8]
    plain = json.loads(admit_spec(adm, checks, lease_expiry_s=300.0, want=None))
    assert "want" not in plain and plain["lease_ttl"] == 120.0


def test_an_allowed_reply_reads_headers_room_and_grants() -> None:
    adm = admission(*RULES, now_s=T0, budgets=BUDGETS)
    reply = [1, 0, 0, 0, 0, 10, 9, 60000, -1, -1, -1, b"4.5", 16, 0]
    decision, room, grants = read_admit_reply(reply, adm)
    assert decision.allowed and decision.reason is None and decision.scope is None
    assert (decision.limit_requests, decision.remaining_requests, decision.reset_requests_s) == (10, 9, 60.0)
    assert (decision.limit_tokens, decision.remaining_tokens, decision.reset_tokens_s) == (None, None, None)
    assert room == 4.5
    assert grants == [16, 0]


def test_a_denial_names_its_rule_or_budget() -> None:
    adm = admission(*RULES, now_s=T0, budgets=BUDGETS)
    denied, _, _ = read_admit_reply([0, 3, 2, 1500, 0, -1, -1, -1, -1, -1, -1, "0"], adm)
    assert (denied.allowed, denied.reason, denied.scope) == (False, "concurrency", "pool:gpu")
    assert denied.retry_after_s == 1.5
    over, room, grants = read_admit_reply([0, 4, 1, 0, 1, -1, -1, -1, -1, -1, -1, "-0.25"], adm)
    assert (over.reason, over.scope, over.exceeds_limit) == ("budget", "tenant", True)
    assert (room, grants) == (-0.25, [])
    unbudgeted, room, _ = read_admit_reply([1, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, "0"], admission(now_s=T0))
    assert unbudgeted.allowed and room is None


def test_a_settle_spec_spreads_usage_over_its_scopes() -> None:
    adm = admission(*RULES, now_s=T0 + 0.5, reserve_tokens=100)
    done = settlement(adm, input_tokens=30, output_tokens=20, cost_usd=0.1, pool="gpu", now_s=T0 + 2)
    spec = json.loads(
        settle_spec(done, settled_ttl_s=3600, ledger_ttl_s=86400, token_keys=[3], lease_keys=[4])
    )
    assert spec["id"] == adm.request_id and spec["marker_ttl"] == 3600 and spec["ledger_ttl"] == 86400
    assert spec["bucket"] == int(T0) and spec["delta"] == -50
    assert spec["oldest_live"] == int(T0) + 2 - WINDOW_S
    assert (spec["input"], spec["output"], spec["cost"]) == (30, 20, "0.1")  # HINCRBYFLOAT gets every digit
    assert spec["scopes"] == ["tenant", "key:k1", "pool:gpu"]
    assert (spec["tokens"], spec["leases"]) == ([3], [4])
    bare = settlement(adm, key_id="", pool="")
    bare_spec = json.loads(settle_spec(bare, settled_ttl_s=1, ledger_ttl_s=1, token_keys=[], lease_keys=[]))
    assert bare_spec["scopes"] == ["tenant"] and bare_spec["oldest_live"] == -1
