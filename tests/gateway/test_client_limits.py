"""ClientLimiter: failed authentications and open-endpoint requests per client, over every store.

The clock is injected: the window slides only when a test moves it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.client_limits import AUTH_FAILURES, OPEN_ROUTES, ClientLimiter
from gateway.compiled import CompiledPolicy
from gateway.errors import RateLimited, ServiceUnavailable
from gateway.stores import (
    Admission,
    CreditStore,
    Decision,
    FailoverStore,
    MemoryStore,
    RedisStore,
    Store,
    StoreUnavailable,
)
from tests.support.calls import compile_doc, policy_doc

T0 = 1_800_000_000.0
NO_HEADERS: dict[str, str] = {}


def _compiled(**unauthenticated: Any) -> CompiledPolicy:
    return compile_doc(policy_doc(limits={"unauthenticated": unauthenticated}))


class Clock:
    def __init__(self) -> None:
        self.now_s = T0

    def __call__(self) -> float:
        return self.now_s


class CountingStore(MemoryStore):
    """A MemoryStore counting the admits that reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.admits = 0

    async def admit(self, admission: Admission) -> Decision:
        self.admits += 1
        return await super().admit(admission)


class DownStore(MemoryStore):
    async def admit(self, admission: Admission) -> Decision:
        raise StoreUnavailable("down")


@pytest.fixture(params=["memory", "redis", "credit"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Each store kind in turn; the Redis ones on the session's real Redis, flushed."""
    made: Store = MemoryStore()
    if request.param != "memory":
        made = RedisStore(request.getfixturevalue("redis_flushed"), timeout_s=2.0)
        if request.param == "credit":
            made = CreditStore(made, clock=lambda: T0)
    yield made
    await made.close()


async def _failures(limiter: ClientLimiter, compiled: CompiledPolicy, peer: str, n: int) -> list[int]:
    """Count ``n`` failures from ``peer``: 401 for each one counted, 429 for each refused."""
    statuses = []
    for _ in range(n):
        try:
            await limiter.count_failure(compiled, peer, NO_HEADERS)
            statuses.append(401)
        except RateLimited:
            statuses.append(429)
    return statuses


async def test_failures_past_the_bound_are_refused_until_the_window_slides(store: Store) -> None:
    clock, refused = Clock(), list[str]()
    limiter = ClientLimiter(store, clock=clock, on_refuse=refused.append)
    compiled = _compiled(failed_auths_per_minute=3)
    assert await _failures(limiter, compiled, "203.0.113.7", 5) == [401, 401, 401, 429, 429]
    assert refused == [AUTH_FAILURES, AUTH_FAILURES]
    clock.now_s = T0 + 30
    with pytest.raises(RateLimited) as raised:
        await limiter.count_failure(compiled, "203.0.113.7", NO_HEADERS)
    error = raised.value
    assert (error.status, error.code, error.type) == (429, "too_many_auth_failures", "rate_limit_error")
    assert error.headers == {"Retry-After": "31"}  # the failures of T0 leave the window at T0 + 61
    clock.now_s = T0 + 61
    assert await _failures(limiter, compiled, "203.0.113.7", 4) == [401, 401, 401, 429]


async def test_clients_are_counted_apart(store: Store) -> None:
    limiter = ClientLimiter(store, clock=Clock())
    compiled = _compiled(failed_auths_per_minute=2)
    assert await _failures(limiter, compiled, "203.0.113.7", 3) == [401, 401, 429]
    assert await _failures(limiter, compiled, "203.0.113.8", 3) == [401, 401, 429]
    # one IPv6 /64 is one client
    assert await _failures(limiter, compiled, "2001:db8::1", 1) == [401]
    assert await _failures(limiter, compiled, "2001:db8::2", 2) == [401, 429]


async def test_open_routes_have_their_own_bound(store: Store) -> None:
    clock, refused = Clock(), list[str]()
    limiter = ClientLimiter(store, clock=clock, on_refuse=refused.append)
    compiled = _compiled(failed_auths_per_minute=1, requests_per_minute=2)
    await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
    await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
    with pytest.raises(RateLimited) as raised:
        await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
    assert raised.value.code == "rate_limit_exceeded" and raised.value.headers == {"Retry-After": "61"}
    assert refused == [OPEN_ROUTES]
    assert await _failures(limiter, compiled, "203.0.113.7", 2) == [401, 429]  # a window of its own


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
async def test_open_routes_are_counted_per_replica_and_answer_while_the_store_is_down(mode: str) -> None:
    """Each replica's /metrics is scraped on its own: its bound is this process's, never the store's."""
    fallbacks: list[str] = []
    down = FailoverStore(DownStore(), MemoryStore(), mode=mode, on_fallback=fallbacks.append)  # type: ignore[arg-type]
    replicas = [ClientLimiter(down, clock=Clock()) for _ in range(2)]
    compiled = _compiled(requests_per_minute=2)
    for limiter in replicas:  # two each: a shared bound would refuse the second replica's
        await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
        await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
        with pytest.raises(RateLimited):
            await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
    assert fallbacks == []  # the shared store was never asked
    await down.close()


async def test_two_replicas_on_one_redis_share_one_bound(redis_flushed: str) -> None:
    stores: list[Store] = [RedisStore(redis_flushed, timeout_s=2.0) for _ in range(2)]
    stores.append(CreditStore(RedisStore(redis_flushed, timeout_s=2.0), clock=lambda: T0))
    limiters = [ClientLimiter(s, clock=Clock()) for s in stores]
    compiled = _compiled(failed_auths_per_minute=100)  # big enough for local credit to apply
    statuses = []
    for i in range(150):
        statuses += await _failures(limiters[i % 3], compiled, "203.0.113.7", 1)
    assert statuses.count(401) == 100 and statuses.count(429) == 50
    for s in stores:
        await s.close()


async def test_a_refused_client_is_refused_without_asking_the_store_again() -> None:
    store, clock = CountingStore(), Clock()
    limiter = ClientLimiter(store, clock=clock)
    compiled = _compiled(failed_auths_per_minute=1)
    assert await _failures(limiter, compiled, "203.0.113.7", 10) == [401] + [429] * 9
    assert store.admits == 2  # the first refusal came from the store; the rest from its answer
    clock.now_s = T0 + 61
    assert await _failures(limiter, compiled, "203.0.113.7", 1) == [401]
    assert store.admits == 3


async def test_a_bound_of_null_counts_nothing() -> None:
    store = CountingStore()
    limiter = ClientLimiter(store, clock=Clock())
    compiled = _compiled(failed_auths_per_minute=None, requests_per_minute=None)
    assert await _failures(limiter, compiled, "203.0.113.7", 100) == [401] * 100
    await limiter.count_request(compiled, "203.0.113.7", NO_HEADERS)
    assert store.admits == 0


async def test_the_default_policy_bounds_failures_at_60_and_open_requests_at_600() -> None:
    limits = compile_doc(policy_doc()).policy.limits.unauthenticated
    assert (limits.failed_auths_per_minute, limits.requests_per_minute, limits.trusted_proxies) == (
        60,
        600,
        (),
    )


async def test_forwarded_clients_are_counted_apart_behind_a_trusted_proxy() -> None:
    limiter = ClientLimiter(MemoryStore(), clock=Clock())
    compiled = _compiled(failed_auths_per_minute=1, trusted_proxies=["10.0.0.0/8"])
    for client in ("198.51.100.1", "198.51.100.2"):
        await limiter.count_failure(compiled, "10.0.0.5", {"x-forwarded-for": client})
    with pytest.raises(RateLimited):
        await limiter.count_failure(compiled, "10.0.0.5", {"x-forwarded-for": "198.51.100.1"})
    # an untrusted peer's header is ignored: both are the peer
    await limiter.count_failure(compiled, "203.0.113.7", {"x-forwarded-for": "198.51.100.3"})
    with pytest.raises(RateLimited):
        await limiter.count_failure(compiled, "203.0.113.7", {"x-forwarded-for": "198.51.100.4"})


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
async def test_a_store_that_fails_does_what_the_policy_says(mode: str) -> None:
    fallbacks: list[str] = []
    store = FailoverStore(
        DownStore(),
        MemoryStore(),
        mode="fail_open" if mode == "fail_open" else "fail_closed",
        on_fallback=fallbacks.append,
    )
    limiter = ClientLimiter(store, clock=Clock())
    compiled = _compiled(failed_auths_per_minute=1)
    if mode == "fail_open":  # counted in this process meanwhile
        assert await _failures(limiter, compiled, "203.0.113.7", 2) == [401, 429]
        assert fallbacks == ["admit", "admit"]
    else:
        with pytest.raises(ServiceUnavailable) as raised:
            await limiter.count_failure(compiled, "203.0.113.7", NO_HEADERS)
        assert raised.value.code == "store_unavailable" and "Retry-After" in raised.value.headers
    await store.close()
