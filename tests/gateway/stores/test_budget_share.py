"""gateway/stores/budget_share.py: a replica's share of the budget room Redis last reported; with
CreditStores on a real Redis, budgets exact across replicas and no round trip far from them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.stores import BudgetRule, CreditStore, LimitRule
from gateway.stores.budget_share import BUDGET_SHARE, BudgetShares
from tests.gateway.stores.conftest import T0, admission, settlement
from tests.gateway.stores.test_credit import Clock, CountingRedisStore, counting

BUDGETS = (BudgetRule(scope="tenant", monthly_usd=10.0),)


def shares(room: float = 1.6, second: int = 100) -> BudgetShares:
    made = BudgetShares()
    made.answered("acme", "2026-12", BUDGETS, second, room)
    return made


def test_no_local_admit_before_a_cost_is_known_or_after_the_answers_second() -> None:
    made = shares()
    assert not made.may_admit("acme", "2026-12", BUDGETS, 100)  # what would a request cost?
    made.settled("acme", "2026-12", 0.01)
    assert made.may_admit("acme", "2026-12", BUDGETS, 100)
    assert not made.may_admit("acme", "2026-12", BUDGETS, 101)
    assert not made.may_admit("other", "2026-12", BUDGETS, 100)


def test_a_replica_spends_a_sixteenth_of_the_room_then_asks() -> None:
    made = shares(room=16.0)  # a share of 1.0
    assert not made.settled("acme", "2026-12", 0.25)  # the request Redis admitted
    local = 0
    while made.may_admit("acme", "2026-12", BUDGETS, 100):
        assert not made.settled("acme", "2026-12", 0.25)
        local += 1
    assert local == 3  # settled 0.25, 0.5, 0.75: each with the next request's 0.25 within the share
    assert 16.0 * BUDGET_SHARE == 1.0


def test_near_the_budget_each_settle_is_written_at_once() -> None:
    made = shares(room=0.05)  # a share of 0.003: below one request
    assert made.settled("acme", "2026-12", 0.01)
    assert not made.may_admit("acme", "2026-12", BUDGETS, 100)
    assert BudgetShares().settled("acme", "2026-12", 0.01)  # no answer known: written at once too


@pytest.fixture
async def make(redis_flushed: str) -> AsyncIterator[Callable[..., CreditStore]]:
    made: list[CreditStore] = []

    def factory(clock: Clock, **kwargs: Any) -> CreditStore:
        redis = CountingRedisStore(redis_flushed, timeout_s=2.0)
        made.append(CreditStore(redis, clock=clock, flush_interval_s=3600, **kwargs))
        return made[-1]

    yield factory
    for store in made:
        await store.close()


@pytest.mark.parametrize("num_replicas", [1, 2, 4])
async def test_a_budget_holds_across_replicas_taking_turns(
    make: Callable[..., CreditStore], num_replicas: int
) -> None:
    """Each request ends before the next begins, on the next replica: none is in flight when another is
    admitted, so the budget is exact: 3 of 0.00012 fit under 0.0003 (spent 0.00036 >= 0.0003 denies).
    Each replica used to admit from the room its own last answer showed, blind to the others' spend."""
    clock = Clock()
    replicas = [make(clock) for _ in range(num_replicas)]
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    budgets = (BudgetRule(scope="key:k1", monthly_usd=0.0003),)
    admitted = 0
    for i in range(20):
        store = replicas[i % num_replicas]
        clock.now = T0 + i * 0.01  # all in one second: local admits would be allowed
        adm = admission(rule, now_s=clock.now, budgets=budgets)
        if (await store.admit(adm)).allowed:
            admitted += 1
            await store.settle(settlement(adm, cost_usd=0.00012, now_s=clock.now + 0.005))
    assert admitted == 3


async def test_far_from_a_budget_admits_stay_local(make: Callable[..., CreditStore]) -> None:
    """A sixteenth of a large room holds many requests: the budget costs no round trip per request."""
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    budgets = (BudgetRule(scope="key:k1", monthly_usd=100.0),)
    for i in range(50):
        clock.now = T0 + i * 0.01
        adm = admission(rule, now_s=clock.now, budgets=budgets)
        assert (await store.admit(adm)).allowed
        await store.settle(settlement(adm, cost_usd=0.001, now_s=clock.now + 0.005))
    assert counting(store).admits <= 2  # the first, and the one before any cost was known
    assert counting(store).flushes == 0  # settles wait for the batch
