"""The slot queue: a saturated pool's requests wait in fair share, bounded, timed out, cancellable.

A real ``Balancer`` holds the replicas and their in-flight counts; the queue's clock and timers are
fakes the tests move by hand, so no test waits on real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.config import PoolRouting, QueueConfig, RoutingConfig
from gateway.replicas.slot_queue import QueueFull, QueueTimeout, SlotQueues, Ticket

QUEUE = QueueConfig(max_wait_s=10.0, max_queued_per_tenant=8)


@dataclass
class Timer:
    at: float
    callback: Callable[[], None]
    is_cancelled: bool = False

    def cancel(self) -> None:
        self.is_cancelled = True


@dataclass
class FakeTime:
    """The queue's clock and ``call_later``: time moves only when a test calls ``advance``."""

    now: float = 100.0
    timers: list[Timer] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay_s, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in [t for t in self.timers if t.at <= self.now and not t.is_cancelled]:
            timer.is_cancelled = True
            timer.callback()

    @property
    def num_armed(self) -> int:
        return sum(not t.is_cancelled for t in self.timers)


@dataclass
class Recorder:
    depth: dict[tuple[str, str], int] = field(default_factory=dict)
    waits: list[tuple[str, str, float]] = field(default_factory=list)
    refusals: list[tuple[str, str, str]] = field(default_factory=list)

    def set_queue_depth(self, pool: str, tenant: str, depth: int) -> None:
        self.depth[pool, tenant] = depth

    def observe_queue_wait(self, pool: str, tenant: str, wait_s: float) -> None:
        self.waits.append((pool, tenant, wait_s))

    def count_queue_refusal(self, pool: str, tenant: str, reason: str) -> None:
        self.refusals.append((pool, tenant, reason))


@dataclass
class Setup:
    balancer: Balancer
    queues: SlotQueues
    time: FakeTime
    seen: Recorder

    async def take(self, tenant: str, pool: str = "large", **ticket: Any) -> ReplicaState | None:
        return await self.queues.take(pool, Ticket(tenant, **ticket), QUEUE, QUEUE.max_wait_s)

    async def served(self, tenant: str, pool: str = "large", **ticket: Any) -> ReplicaState:
        """Take a slot at once and hold it, as the upstream stage does."""
        state = await self.take(tenant, pool, **ticket)
        assert state is not None
        state.acquire()
        return state

    async def queued(
        self, tenant: str, pool: str = "large", **ticket: Any
    ) -> asyncio.Task[ReplicaState | None]:
        """Start a request that will wait; return once it is in the queue."""
        before = self.queues.queue(pool).waiting.num_queued(tenant)
        task = asyncio.create_task(self.take(tenant, pool, **ticket))
        await until(lambda: self.queues.queue(pool).waiting.num_queued(tenant) == before + 1)
        return task


def make(cap: int = 1, *, large: int = 1, small: int = 0, fallback: bool = False) -> Setup:
    pools: dict[str, Any] = {"large": large, "small": small} if small else {"large": large}
    document = {
        "pools": {
            name: {"replicas": [{"base_url": f"http://{name}{i}.test/v1", "model": "m"} for i in range(n)]}
            for name, n in pools.items()
        }
    }
    routing = RoutingConfig(
        pools={
            "large": PoolRouting(max_outstanding_per_replica=cap, fallbacks=("small",) if fallback else ()),
            **({"small": PoolRouting(max_outstanding_per_replica=cap)} if small else {}),
        }
    )
    balancer = Balancer(routing=routing)
    balancer.update(parse_policy(document, "test.yaml"))
    fake, seen = FakeTime(), Recorder()
    queues = SlotQueues(balancer, observer=seen, clock=fake.clock, call_later=fake.call_later)
    return Setup(balancer, queues, fake, seen)


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (the queue never needs real time to get there)."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def next_served(setup: Setup, tasks: dict[str, asyncio.Task[ReplicaState | None]]) -> str:
    """Release nothing; wait for exactly one of ``tasks`` to get its slot; hold it; return its name."""
    await until(lambda: any(task.done() for task in tasks.values()))
    (name,) = [name for name, task in tasks.items() if task.done()]
    state = tasks.pop(name).result()
    assert state is not None
    state.acquire()
    return name


async def serve_in_turn(setup: Setup, first: ReplicaState, tasks: dict[str, asyncio.Task[Any]]) -> list[str]:
    """With one slot: release it, see who gets it, and again until every task was served."""
    order, holder = [], first
    while tasks:
        setup.balancer.release(holder)
        order.append(await next_served(setup, tasks))
        holder = setup.balancer.replicas("large")[0]
    return order


async def test_room_serves_at_once() -> None:
    setup = make(cap=2)
    first, second = await setup.served("a"), await setup.served("a")
    assert first is second and first.outstanding == 2
    assert setup.seen.waits == [("large", "a", 0.0), ("large", "a", 0.0)]
    assert setup.queues.queue("large").is_idle and setup.time.timers == []


async def test_a_release_wakes_the_next_waiter() -> None:
    setup = make()
    holder = await setup.served("a")
    task = await setup.queued("b")
    assert setup.seen.depth["large", "b"] == 1 and not task.done()
    setup.time.now += 2.5
    setup.balancer.release(holder)
    assert await task is holder
    assert setup.seen.depth["large", "b"] == 0
    assert setup.seen.waits[-1] == ("large", "b", 2.5)
    assert setup.time.num_armed == 0  # its timer went with it


async def test_a_flooding_tenant_does_not_starve_another() -> None:
    setup = make()
    holder = await setup.served("a")  # a0 holds the one slot
    tasks = {f"a{i}": await setup.queued("a") for i in range(1, 7)}
    tasks |= {f"b{i}": await setup.queued("b") for i in range(1, 4)}
    order = await serve_in_turn(setup, holder, tasks)
    assert order == ["b1", "a1", "b2", "a2", "b3", "a3", "a4", "a5", "a6"]


async def test_weights_share_the_slots() -> None:
    setup = make()
    holder = await setup.served("c")  # a third tenant holds the slot: neither a nor b is charged
    tasks = {f"a{i}": await setup.queued("a", weight=1.0) for i in range(6)}
    tasks |= {f"b{i}": await setup.queued("b", weight=2.0) for i in range(6)}
    order = await serve_in_turn(setup, holder, tasks)
    assert order[:9] == ["a0", "b0", "b1", "a1", "b2", "b3", "a2", "b4", "b5"]


async def test_a_more_urgent_class_goes_first() -> None:
    setup = make()
    holder = await setup.served("a")
    tasks = {"batch": await setup.queued("a", priority=5), "normal": await setup.queued("b")}
    tasks["urgent"] = await setup.queued("c", priority=-1)
    assert await serve_in_turn(setup, holder, tasks) == ["urgent", "normal", "batch"]


async def test_background_work_leaves_the_interactive_reserve_free() -> None:
    setup = make(cap=3)  # three slots, one kept for interactive requests
    setup.balancer.release(await setup.served("b"))  # interactive traffic: the reserve is held
    lines = [await setup.served("a", priority=9, leave_free=1) for _ in range(2)]
    third = await setup.queued("a", priority=9, leave_free=1)  # only the reserve is free: it waits
    interactive = await setup.served("b")  # takes the reserve at once, past the waiting line
    assert interactive is lines[0] and interactive.outstanding == 3 and not third.done()
    setup.balancer.release(interactive)  # the reserve frees up: still not for background work
    await until(lambda: setup.queues.queue("large").num_granted == 0)
    assert not third.done()
    setup.balancer.release(lines[0])  # two free now: the line takes one, one stays in reserve
    assert await third is lines[0]
    assert setup.queues.queue("large").is_idle


async def test_an_interactive_waiter_is_granted_before_background_ones() -> None:
    setup = make(cap=2)
    holders = [await setup.served("a"), await setup.served("b")]
    tasks = {"line": await setup.queued("a", priority=9, leave_free=1), "chat": await setup.queued("b")}
    setup.balancer.release(holders[0])
    assert await next_served(setup, tasks) == "chat"  # the only free slot is the reserve
    setup.balancer.release(holders[1])
    await until(lambda: setup.queues.queue("large").num_granted == 0)
    assert not tasks["line"].done()  # one free, and it is the reserve
    setup.balancer.release(holders[0])
    assert await next_served(setup, tasks) == "line"


async def test_without_interactive_traffic_background_work_fills_every_slot() -> None:
    setup = make(cap=2)
    background: dict[str, Any] = {"priority": 9, "leave_free": 1}
    replica = setup.balancer.replicas("large")[0]
    assert await setup.served("a", **background) is await setup.served("a", **background)  # none seen
    setup.balancer.release(replica)
    setup.balancer.release(replica)
    setup.balancer.release(await setup.served("b"))  # an interactive request holds the reserve ...
    await setup.served("a", **background)
    line = await setup.queued("a", **background)
    setup.time.now += QUEUE.interactive_reserve_hold_s  # ... until the hold runs out with no other
    setup.balancer.release(replica)  # a release dispatches
    taken = await line
    assert taken is not None
    taken.acquire()
    assert (await setup.served("a", **background)).outstanding == 2


async def test_a_full_tenant_queue_refuses_at_once_and_others_still_wait() -> None:
    setup = make()
    holder = await setup.served("a")
    tasks = {f"a{i}": await setup.queued("a") for i in range(QUEUE.max_queued_per_tenant)}
    with pytest.raises(QueueFull):
        await setup.take("a")
    assert setup.seen.refusals == [("large", "a", "full")]
    tasks["b"] = await setup.queued("b")
    assert (await serve_in_turn(setup, holder, tasks))[0] == "b"


async def test_the_wait_ends_at_its_limit_and_leaves_nothing_behind() -> None:
    setup = make()
    holder = await setup.served("a")
    late = await setup.queued("b")
    setup.time.advance(QUEUE.max_wait_s - 0.001)
    assert not late.done()
    setup.time.advance(0.001)
    with pytest.raises(QueueTimeout):
        await late
    queue = setup.queues.queue("large")
    assert setup.seen.refusals == [("large", "b", "timeout")] and setup.seen.depth["large", "b"] == 0
    assert queue.is_idle
    setup.balancer.release(holder)
    assert await setup.take("c") is holder  # the queue is empty: served at once


async def test_no_time_left_is_a_timeout_without_waiting() -> None:
    setup = make()
    await setup.served("a")
    with pytest.raises(QueueTimeout):
        await setup.queues.take("large", Ticket("b"), QUEUE, 0.0)
    assert setup.queues.queue("large").is_idle


async def test_a_client_that_leaves_while_waiting_leaves_the_queue() -> None:
    setup = make()
    holder = await setup.served("a")
    gone = await setup.queued("b")
    stays = await setup.queued("c")
    gone.cancel()
    await until(gone.done)
    assert setup.seen.depth["large", "b"] == 0 and setup.queues.queue("large").waiting.num_queued("b") == 0
    assert setup.time.num_armed == 1  # only the waiter that stayed has a timer
    setup.balancer.release(holder)
    assert await stays is holder


async def test_a_grant_its_waiter_cannot_use_goes_to_the_next() -> None:
    setup = make()
    holder = await setup.served("a")
    first = await setup.queued("b")
    second = await setup.queued("c")
    setup.balancer.release(holder)  # grants first, which has not run yet ...
    first.cancel()  # ... and leaves before it does
    assert await second is holder
    assert first.cancelled()
    assert setup.queues.queue("large").num_granted == 0


async def test_a_slot_taken_under_a_granted_waiter_keeps_its_place() -> None:
    setup = make()
    holder = await setup.served("a")
    first = await setup.queued("b")
    setup.balancer.release(holder)  # granted to first ...
    holder.acquire()  # ... but a retry (which never queues) took the slot before first ran
    await until(lambda: setup.queues.queue("large").waiting.num_queued("b") == 1)
    assert not first.done() and setup.queues.queue("large").num_granted == 0
    second = await setup.queued("c")
    setup.balancer.release(holder)
    assert await first is holder and not second.done()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_a_pool_that_is_down_answers_none_without_waiting() -> None:
    setup = make()
    (state,) = setup.balancer.replicas("large")
    state.breaker.trip(setup.balancer.clock())
    assert await setup.take("a") is None
    assert setup.queues.queue("large").is_idle


async def test_a_fallback_with_room_serves_and_its_release_wakes_the_queue() -> None:
    setup = make(small=1, fallback=True)
    large = await setup.served("a")
    small = await setup.served("a")
    assert (large.pool, small.pool) == ("large", "small")
    waiting = await setup.queued("b")
    setup.balancer.release(small)
    assert await waiting is small
