"""Fixtures for the store tests: one test body runs over MemoryStore, RedisStore (a real Redis) and
CreditStore (local credit in front of that RedisStore)."""

from __future__ import annotations

import calendar
import itertools
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.stores import (
    Admission,
    BudgetRule,
    CreditStore,
    LimitRule,
    MemoryStore,
    RedisStore,
    Settlement,
    Store,
)

T0 = float(calendar.timegm((2026, 11, 15, 0, 0, 0, 0, 0, 0)))
"""A Unix time in the middle of November 2026: the tests' clock starts here."""
MONTH = "2026-11"

_ids = itertools.count()


def admission(
    *rules: LimitRule,
    now_s: float,
    reserve_tokens: int = 0,
    budgets: tuple[BudgetRule, ...] = (),
    tenant: str = "acme",
    request_id: str | None = None,
    lease_ttl_s: float = 30.0,
    month: str = MONTH,
) -> Admission:
    """An Admission with defaults for everything a test does not care about."""
    return Admission(
        tenant=tenant,
        request_id=request_id or f"req-{next(_ids)}",
        rules=rules,
        budgets=budgets,
        reserve_tokens=reserve_tokens,
        now_s=now_s,
        lease_ttl_s=lease_ttl_s,
        month=month,
    )


def settlement(
    adm: Admission,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost_usd: float = 0.0,
    pool: str = "default",
    key_id: str = "k1",
    now_s: float | None = None,
) -> Settlement:
    """The Settlement of an admitted Admission."""
    return Settlement(
        tenant=adm.tenant,
        request_id=adm.request_id,
        rules=adm.rules,
        budgets=adm.budgets,
        reserved_tokens=adm.reserve_tokens,
        reserved_at_s=adm.now_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost_usd,
        pool=pool,
        key_id=key_id,
        month=adm.month,
        now_s=now_s,
    )


@pytest.fixture(params=["memory", "redis", "credit"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Each store kind in turn; the Redis ones on the session's real Redis, flushed."""
    made: Store
    if request.param == "memory":
        made = MemoryStore()
    else:
        url = request.getfixturevalue("redis_flushed")
        made = RedisStore(url, timeout_s=2.0)  # generous: these tests check semantics, not latency
        if request.param == "credit":
            made = CreditStore(made, clock=lambda: T0)
    yield made
    await made.close()


@pytest.fixture
async def redis_stores(redis_flushed: str) -> AsyncIterator[Callable[..., RedisStore]]:
    """A factory of RedisStores on the flushed session Redis, closed after the test."""
    made: list[RedisStore] = []

    def make(**kwargs: object) -> RedisStore:
        kwargs.setdefault("timeout_s", 2.0)
        s = RedisStore(redis_flushed, **kwargs)  # type: ignore[arg-type]
        made.append(s)
        return s

    yield make
    for s in made:
        await s.close()
