"""Single flight: identical concurrent misses make one upstream call, in one process and across two."""

from __future__ import annotations

import asyncio
import time

from gateway.cache import CacheKeys, Entry, EntryKind, MemoryBlobs, RedisBlobs, ResponseCache, SingleFlight
from tests.gateway.cache.conftest import Backend, Events
from tests.gateway.cache.samples import CHAT, encode

KEY = CacheKeys().response("acme", "small", "f" * 32)
ENTRY = Entry(EntryKind.CHAT, encode(CHAT))


class Producer:
    """A fake upstream call that counts how often it runs."""

    def __init__(self, delay_s: float = 0.1, fail_first: int = 0) -> None:
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.calls = 0

    async def __call__(self) -> Entry:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        if self.calls <= self.fail_first:
            raise RuntimeError("upstream failed")
        return ENTRY


async def test_twenty_identical_gets_make_one_call(backend: Backend) -> None:
    events = Events()
    flight = SingleFlight(ResponseCache(backend.blobs()), on_event=events)
    produce = Producer()
    results = await asyncio.gather(*(flight.load(KEY, produce, ttl_s=60, wait_s=5) for _ in range(20)))
    assert produce.calls == 1
    assert all(entry == ENTRY for entry, _ in results)
    assert sorted(how for _, how in results) == ["produced"] + ["wait"] * 19
    assert events["flight_follow"] == 19
    assert flight.num_in_flight == 0
    # and the next one is a plain hit
    assert await flight.load(KEY, produce, ttl_s=60, wait_s=5) == (ENTRY, "hit")


async def test_across_two_gateway_replicas_one_call(redis_flushed: str) -> None:
    # two SingleFlights on two separate Redis clients: two gateway processes, as Redis sees them
    events = Events()
    caches = [ResponseCache(RedisBlobs(redis_flushed, timeout_s=2.0)) for _ in range(2)]
    flights = [SingleFlight(c, on_event=events, poll_s=(0.002, 0.02)) for c in caches]
    produce = Producer(delay_s=0.2)
    calls = [flights[i % 2].load(KEY, produce, ttl_s=60, wait_s=5) for i in range(20)]
    results = await asyncio.gather(*calls)
    assert produce.calls == 1
    assert all(entry == ENTRY for entry, _ in results)
    assert events["flight_remote"] == 1  # the other replica's local leader polled the entry...
    assert events["flight_follow"] == 18  # ...and everyone else followed their local leader
    assert await caches[0].blobs.get(CacheKeys.lock(KEY)) is None  # the lock was released
    for cache in caches:
        await cache.close()


async def test_across_two_flights_on_one_memory_store() -> None:
    blobs = MemoryBlobs()
    flights = [SingleFlight(ResponseCache(blobs), poll_s=(0.002, 0.02)) for _ in range(2)]
    produce = Producer(delay_s=0.1)
    results = await asyncio.gather(
        *(flights[i % 2].load(KEY, produce, ttl_s=60, wait_s=5) for i in range(10))
    )
    assert produce.calls == 1 and all(entry == ENTRY for entry, _ in results)


async def test_a_failed_leader_releases_its_followers(backend: Backend) -> None:
    blobs = backend.blobs()
    flight = SingleFlight(ResponseCache(blobs))
    produce = Producer(delay_s=0.05, fail_first=1)
    results = await asyncio.gather(
        *(flight.load(KEY, produce, ttl_s=60, wait_s=5) for _ in range(5)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)  # only the leader sees its error
    assert produce.calls == 5  # the followers fell through to their own calls
    assert all(r == (ENTRY, "produced") for r in results if not isinstance(r, BaseException))
    assert flight.num_in_flight == 0
    assert await blobs.get(CacheKeys.lock(KEY)) is None


async def test_followers_wait_no_longer_than_their_budget(backend: Backend) -> None:
    events = Events()
    flight = SingleFlight(ResponseCache(backend.blobs()), on_event=events)
    slow = Producer(delay_s=0.5)
    leader = asyncio.create_task(flight.load(KEY, slow, ttl_s=60, wait_s=5))
    while flight.num_in_flight == 0:  # noqa: ASYNC110 (the leader has taken the lead)
        await asyncio.sleep(0.001)
    follower = await flight.acquire(KEY, wait_s=0.05)
    assert not leader.done()  # it gave up on its own budget, not when the leader finished
    assert follower.entry is None and not follower.is_leader  # fall through to its own call
    assert events["flight_timeout"] == 1
    await follower.release()  # a no-op for a follower
    assert (await leader) == (ENTRY, "produced")


async def test_a_remote_leader_that_gives_up_hands_over_the_lead(redis_flushed: str) -> None:
    caches = [ResponseCache(RedisBlobs(redis_flushed, timeout_s=2.0)) for _ in range(2)]
    first, second = (SingleFlight(c, poll_s=(0.002, 0.01)) for c in caches)
    leader = await first.acquire(KEY, wait_s=5)
    assert leader.is_leader
    waiting = asyncio.create_task(second.acquire(KEY, wait_s=5))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # polling the other replica's leader
    await leader.release(None)  # it failed: nothing stored
    successor = await asyncio.wait_for(waiting, 2)
    assert successor.is_leader and successor.entry is None
    await caches[1].put(KEY, ENTRY, 60)
    await successor.release(ENTRY)
    again = await first.acquire(KEY, wait_s=5)  # the lock is free again
    assert again.is_leader
    await again.release()
    for cache in caches:
        await cache.close()


async def test_a_remote_leader_past_the_budget_means_leading_without_the_lock(redis_flushed: str) -> None:
    caches = [ResponseCache(RedisBlobs(redis_flushed, timeout_s=2.0)) for _ in range(2)]
    first, second = (SingleFlight(c, poll_s=(0.002, 0.01)) for c in caches)
    leader = await first.acquire(KEY, wait_s=5)
    started = time.perf_counter()
    other = await second.acquire(KEY, wait_s=0.1)
    assert 0.1 <= time.perf_counter() - started < 5  # its budget, not the leader's 5 s
    assert other.is_leader and other.entry is None
    await other.release()
    assert await caches[0].blobs.get(CacheKeys.lock(KEY)) is not None  # not its lock to drop
    await leader.release()
    assert await caches[0].blobs.get(CacheKeys.lock(KEY)) is None
    for cache in caches:
        await cache.close()


async def test_a_lock_is_only_released_by_its_holder(backend: Backend) -> None:
    blobs = backend.blobs()
    lock = CacheKeys.lock(KEY)
    assert await blobs.acquire_lock(lock, "mine", 60) is True
    assert await blobs.acquire_lock(lock, "yours", 60) is False
    await blobs.release_lock(lock, "yours")
    assert await blobs.get(lock) == b"mine"
    await blobs.release_lock(lock, "mine")
    assert await blobs.acquire_lock(lock, "yours", 10) is True
    assert await blobs.acquire_lock(lock, "third", 60) is False
    await backend.advance(10)  # an expired lock is free
    assert await blobs.acquire_lock(lock, "third", 60) is True


async def test_a_leader_that_never_releases_blocks_no_longer_than_the_lock_ttl() -> None:
    from tests.gateway.cache.conftest import FakeClock

    clock = FakeClock()
    flight = SingleFlight(ResponseCache(MemoryBlobs(clock=clock)), clock=clock)
    stuck = await flight.acquire(KEY, wait_s=1, lock_ttl_s=30)
    assert stuck.is_leader  # ...and then it never calls release (a bug)
    follower = await flight.acquire(KEY, wait_s=0.01)
    assert not follower.is_leader and follower.entry is None
    clock.now += 31
    fresh = await flight.acquire(KEY, wait_s=1)
    assert fresh.is_leader
    await fresh.release(ENTRY)
    await stuck.release()  # late: must not disturb anything
    assert flight.num_in_flight == 0
