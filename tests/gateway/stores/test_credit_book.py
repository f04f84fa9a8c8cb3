"""CreditBook: spending window credit and spare lease slots, and handing them back to pending writes.

No Redis is reached: what goes back is read from the tenant's pending writes before they are sent.
"""

from __future__ import annotations

import pytest

from gateway.stores import LimitRule, RedisStore
from gateway.stores.credit_book import MIN_POOLED_LIMIT, CreditBook
from gateway.stores.credit_plan import CreditPlan
from gateway.stores.key_layouts import KeyLayouts
from gateway.stores.key_names import KeySpace
from gateway.stores.leases import Held
from gateway.stores.writeback import WriteBack

RPM, TPM, CONC = "sy:{t:acme}:rpm:key:k1", "sy:{t:acme}:tpm:key:k1", "sy:{t:acme}:conc:key:k1"
SECOND = 1_000


@pytest.fixture
def writes() -> WriteBack:
    return WriteBack(RedisStore("redis://127.0.0.1:1"))  # never sent: the tests read what is pending


def _plan(limit: int = 100) -> CreditPlan:
    rule = LimitRule(scope="key:k1", requests_per_minute=limit, tokens_per_minute=limit, max_concurrent=limit)
    return CreditPlan(*KeyLayouts(KeySpace()).admit("acme", "2026-11", (rule,)))


def test_window_credit_is_spent_only_in_its_own_second(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    book.windows[RPM] = ["acme", SECOND, 2]
    book.windows[TPM] = ["acme", SECOND, 150]
    local = [(1, RPM), (2, TPM)]
    assert not book.can_spend(local, SECOND + 1, 100, 0.0)  # a second later: no good
    assert not book.can_spend(local, SECOND, 151, 0.0)  # not enough tokens
    assert book.can_spend(local, SECOND, 100, 0.0)
    assert book.spend(local, 100) == ([], float("inf"))
    assert book.windows[RPM][2] == 1 and book.windows[TPM][2] == 50
    assert not book.can_spend(local, SECOND, 100, 0.0)
    assert book.can_spend(local, SECOND, 0, 0.0)  # reserving no tokens needs no token credit


def test_a_spare_slot_serves_only_with_enough_lease_left(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    book.slots[CONC] = [("r1#1", SECOND + 30.0, SECOND)]
    local = [(3, CONC)]
    assert not book.can_spend(local, SECOND, 0, SECOND + 31.0)
    assert book.can_spend(local, SECOND, 0, SECOND + 30.0)
    assert book.spend(local, 0) == ([(CONC, "r1#1", True)], SECOND + 30.0)
    assert not book.can_spend(local, SECOND, 0, 0.0)  # none left


def test_grants_add_credit_and_spare_slots(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    plan = _plan(limit=MIN_POOLED_LIMIT)
    book.windows[RPM] = ["acme", SECOND - 1, 5]  # left over from a second gone by
    book.windows[TPM] = ["acme", SECOND, 10]
    now = SECOND + 0.5
    held = book.add_grants("acme", plan, [4, 20, 2], request_id="r9", now_s=now, expiry_s=SECOND + 30)
    assert held == [(CONC, "r9", True)]  # the request's own lease may become a spare slot
    assert book.windows == {RPM: ["acme", SECOND, 4], TPM: ["acme", SECOND, 30]}
    assert book.slots[CONC] == [("r9#1", SECOND + 30, now), ("r9#2", SECOND + 30, now)]
    assert writes.of("acme").adjust == {(RPM, SECOND - 1): -5}  # the old second's credit went back


def test_leases_under_small_limits_never_become_spare_slots(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    plan = _plan(limit=MIN_POOLED_LIMIT - 1)
    held = book.add_grants("acme", plan, [0, 0, 0], request_id="r1", now_s=SECOND, expiry_s=SECOND + 30)
    assert held == [(CONC, "r1", False)]
    assert book.windows == {} and book.slots == {}


def test_hand_back_keys_empties_them_before_redis_is_asked(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    book.windows[RPM] = ["acme", SECOND, 3]
    book.windows[TPM] = ["acme", SECOND, 0]
    book.slots[CONC] = [("r1#1", SECOND + 30.0, SECOND), ("r1#2", SECOND + 30.0, SECOND)]
    book.hand_back_keys("acme", [(1, RPM), (2, TPM), (3, CONC)])
    assert book.windows == {} and book.slots == {}
    pending = writes.of("acme")
    assert pending.adjust == {(RPM, SECOND): -3}  # nothing to hand back of an empty credit
    assert pending.release == {CONC: ["r1#1", "r1#2"]}


def test_a_settle_returns_tokens_to_credit_only_within_its_second(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    book.windows[TPM] = ["acme", SECOND, 10]
    book.adjust_tokens("acme", [TPM], SECOND, -40)  # reserved 40 more than used, this very second
    assert book.windows[TPM][2] == 50
    book.adjust_tokens("acme", [TPM], SECOND - 1, -7)  # an earlier second: Redis's bucket
    book.adjust_tokens("acme", [TPM], SECOND, 5)  # used more than reserved: Redis's bucket
    assert writes.of("acme").adjust == {(TPM, SECOND - 1): -7, (TPM, SECOND): 5}


def test_a_finished_requests_leases_become_spares_or_are_released(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    tenant_set = "sy:{t:acme}:conc:tenant"
    held = Held("acme", [(CONC, "r1", True), (tenant_set, "r1", False)], SECOND + 30, SECOND + 60)
    book.return_leases("acme", held, SECOND + 1.0)
    assert book.slots == {CONC: [("r1", SECOND + 30, SECOND + 1.0)]}
    assert writes.of("acme").release == {tenant_set: ["r1"]}
    expired = Held("acme", [(CONC, "r2", True)], SECOND + 30, SECOND + 60)
    book.return_leases("acme", expired, SECOND + 30.0)
    assert writes.of("acme").release[CONC] == ["r2"]


def test_hand_back_returns_spent_seconds_and_idle_slots(writes: WriteBack) -> None:
    book = CreditBook(writes, slot_idle_s=0.25)
    book.windows[RPM] = ["acme", SECOND, 3]
    book.windows[TPM] = ["acme", SECOND + 1, 9]
    book.return_leases("acme", Held("acme", [(CONC, "old", True)], SECOND + 30, SECOND + 60), SECOND + 0.5)
    book.return_leases("acme", Held("acme", [(CONC, "new", True)], SECOND + 30, SECOND + 60), SECOND + 1.0)
    book.hand_back(SECOND + 1.1)
    assert book.windows == {TPM: ["acme", SECOND + 1, 9]}  # the current second's credit stays
    assert book.slots == {CONC: [("new", SECOND + 30, SECOND + 1.0)]}  # used 0.1 s ago: kept
    pending = writes.of("acme")
    assert pending.adjust == {(RPM, SECOND): -3}
    assert pending.release == {CONC: ["old"]}
    book.hand_back(SECOND + 1.1, everything=True)
    assert book.windows == {} and book.slots == {}
    assert pending.adjust == {(RPM, SECOND): -3, (TPM, SECOND + 1): -9}
    assert pending.release == {CONC: ["old", "new"]}
