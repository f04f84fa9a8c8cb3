"""A saturated pool's waiting room: requests wait, bounded per tenant, for a replica slot to free up.

A pool whose policy has ``routing.pools.<name>.queue`` serves a request at once while the pool or one
of its fallbacks has a replica below ``max_outstanding_per_replica`` and nobody is waiting. Otherwise
the request waits in the pool's :class:`~gateway.replicas.fair_queue.FairQueue` (priority class, then
weighted fair share among tenants, first come first served per tenant). Every released slot
(``Balancer.release``) wakes :meth:`SlotQueue.dispatch`, which grants as many waiters as there are free
slots; a granted waiter then picks its replica. Nothing polls: each waiter awaits one future, and a
timer (``call_later``, injectable) ends its wait.

What a waiter can get:

- its replica (the usual case);
- None when no replica of the pool or its fallbacks takes requests at all (down, not busy: the
  caller answers ``no_healthy_replica`` as without a queue);
- :class:`QueueFull` at once when its tenant already has ``max_queued_per_tenant`` waiting;
- :class:`QueueTimeout` when the wait reaches ``timeout_s`` (the caller's ``max_wait_s``, or less
  when the request's deadline is nearer).

A waiter whose task is cancelled (its client left) leaves the queue at once; one cancelled after it
was granted a slot hands the slot to the next. A granted waiter that finds its slot taken (a retry, or
another pool falling back to this one, got there first) goes back to the head of its line with the
same deadline. Queues live in one gateway process, like the in-flight counts they wait on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gateway.replicas.balancer import Balancer
from gateway.replicas.config import QueueConfig
from gateway.replicas.fair_queue import Entry, FairQueue
from gateway.replicas.state import ReplicaState

__all__ = [
    "CallLater",
    "QueueFull",
    "QueueObserver",
    "QueueRefused",
    "QueueTimeout",
    "SlotQueue",
    "SlotQueues",
    "Ticket",
]

S = TypeVar("S")


class QueueRefused(Exception):
    """The queue turned the request away (see the two kinds below)."""

    reason = "refused"


class QueueFull(QueueRefused):
    """The tenant already has ``max_queued_per_tenant`` requests waiting."""

    reason = "full"


class QueueTimeout(QueueRefused):
    """No slot came within the wait limit."""

    reason = "timeout"


@dataclass(frozen=True, slots=True)
class Ticket:
    """Who is asking for a slot, and with what claim on it."""

    tenant: str
    priority: int = 0
    """The request's class: lower goes first."""
    weight: float = 1.0
    """The tenant's share of its class, relative to the other tenants waiting in it."""
    leave_free: int = 0
    """Free slots the request must leave to others: a background request (a batch line) takes a slot
    only while more than this many are free (its pool's ``queue.interactive_reserve``)."""


class QueueObserver(Protocol):
    """Where the queue reports (``gateway.telemetry.metrics.Metrics``)."""

    def set_queue_depth(self, pool: str, tenant: str, depth: int) -> None: ...

    def observe_queue_wait(self, pool: str, tenant: str, wait_s: float) -> None: ...

    def count_queue_refusal(self, pool: str, tenant: str, reason: str) -> None: ...


class _Unobserved:
    def set_queue_depth(self, pool: str, tenant: str, depth: int) -> None:
        pass

    def observe_queue_wait(self, pool: str, tenant: str, wait_s: float) -> None:
        pass

    def count_queue_refusal(self, pool: str, tenant: str, reason: str) -> None:
        pass


class Cancellable(Protocol):
    def cancel(self) -> None: ...


CallLater = Callable[[float, Callable[[], None]], Cancellable]
"""``loop.call_later``'s shape: run the callback after so many seconds; ``cancel()`` the handle."""


def _loop_call_later(delay_s: float, callback: Callable[[], None]) -> Cancellable:
    return asyncio.get_running_loop().call_later(delay_s, callback)


@dataclass(slots=True, eq=False)
class _Waiter:
    ticket: Ticket
    future: asyncio.Future[None]
    queued_at: float
    deadline: float
    entry: Entry[_Waiter] | None = None
    timer: Cancellable | None = None
    is_granted: bool = False
    """Granted a slot it has not taken yet (it counts in ``num_granted``)."""


class SlotQueue(Generic[S]):
    """The fair queue of one pool. ``free_slots()`` says how many requests the pool and its fallbacks
    can take now (None: no bound), ``has_usable()`` whether any replica takes requests at all."""

    def __init__(
        self,
        pool: str,
        *,
        free_slots: Callable[[], int | None],
        has_usable: Callable[[], bool],
        clock: Callable[[], float] = time.perf_counter,
        call_later: CallLater = _loop_call_later,
        observer: QueueObserver | None = None,
    ) -> None:
        self.pool = pool
        self.free_slots = free_slots
        self.has_usable = has_usable
        self.clock = clock
        self.call_later = call_later
        self.observer: QueueObserver = observer or _Unobserved()
        self.waiting: FairQueue[_Waiter] = FairQueue()
        self.num_granted = 0
        """Waiters granted a slot that have not taken it yet: new arrivals queue behind them."""
        self.reserve_until = float("-inf")
        """Until when (``clock``) background requests leave their ``leave_free`` slots: the last
        interactive request's arrival plus ``queue.interactive_reserve_hold_s``."""

    @property
    def is_idle(self) -> bool:
        """Nobody waits and no grant is on its way: a new request may take a free slot directly."""
        return not self.waiting and not self.num_granted

    async def take(
        self, ticket: Ticket, config: QueueConfig, timeout_s: float, pick: Callable[[], S | None]
    ) -> S | None:
        """The slot ``pick()`` finds once it is ``ticket``'s turn (see the module's docstring)."""
        if not ticket.leave_free:  # interactive: hold the reserve for a while
            self.reserve_until = self.clock() + config.interactive_reserve_hold_s
        if self.is_idle and self._leaves_room(ticket):  # nobody waits: serve now if there is room
            slot = pick()
            if slot is not None:
                self.waiting.charge(ticket.tenant, priority=ticket.priority, weight=ticket.weight)
                self.observer.observe_queue_wait(self.pool, ticket.tenant, 0.0)
                return slot
        if not self.has_usable():  # down, not busy: waiting would not help
            return None
        if self.waiting.num_queued(ticket.tenant) >= config.max_queued_per_tenant:
            raise self._refuse(ticket, QueueFull())
        if timeout_s <= 0:
            raise self._refuse(ticket, QueueTimeout())
        now = self.clock()
        waiter = _Waiter(ticket, asyncio.get_running_loop().create_future(), now, now + timeout_s)
        waiter.entry = self.waiting.push(
            waiter, ticket.tenant, priority=ticket.priority, weight=ticket.weight
        )
        self._arm(waiter, timeout_s)
        self._depth_changed(ticket.tenant)
        try:
            self.dispatch()  # a free slot nobody was granted yet (a reload, a breaker come back)
            while True:
                await waiter.future  # granted, or QueueTimeout from the timer
                waiter.is_granted = False
                self.num_granted -= 1
                slot = pick()
                if slot is not None:
                    self.observer.observe_queue_wait(
                        self.pool, ticket.tenant, self.clock() - waiter.queued_at
                    )
                    return slot
                if not self.has_usable():
                    return None
                self._requeue(waiter)  # someone else took the slot first: head of the line again
        except asyncio.CancelledError:  # the client left
            self._leave(waiter)
            raise
        finally:
            if waiter.timer is not None:
                waiter.timer.cancel()

    def dispatch(self) -> None:
        """Grant the next waiters, one per free slot not granted yet."""
        while self.waiting:
            free = self.free_slots()
            if free is not None and free <= self.num_granted:
                return
            head = self.waiting.peek()
            if head is not None and not self._leaves_room(head.item.ticket, free):
                return  # a background head: the rest behind it are background too (later classes)
            entry = self.waiting.pop()
            assert entry is not None
            waiter = entry.item
            self._depth_changed(waiter.ticket.tenant)
            if waiter.future.done():  # cancelled, leaving: its except clause finds nothing to undo
                continue
            waiter.is_granted = True
            self.num_granted += 1
            waiter.future.set_result(None)

    # -- inside

    def _leaves_room(self, ticket: Ticket, free: int | None = None) -> bool:
        """Whether ``ticket`` may take a slot now and still leave ``ticket.leave_free`` to others."""
        if not ticket.leave_free or self.clock() >= self.reserve_until:
            return True
        if free is None:
            free = self.free_slots()
        return free is None or free - self.num_granted > ticket.leave_free

    def _arm(self, waiter: _Waiter, delay_s: float) -> None:
        waiter.timer = self.call_later(delay_s, lambda: self._expire(waiter))

    def _expire(self, waiter: _Waiter) -> None:
        """The timer fired: a queued waiter leaves with QueueTimeout (a granted one takes its slot)."""
        entry = waiter.entry
        if entry is None or not entry.is_queued or waiter.future.done():
            return
        self.waiting.remove(entry)
        self._depth_changed(waiter.ticket.tenant)
        waiter.future.set_exception(self._refuse(waiter.ticket, QueueTimeout()))

    def _requeue(self, waiter: _Waiter) -> None:
        remaining = waiter.deadline - self.clock()
        if remaining <= 0:
            raise self._refuse(waiter.ticket, QueueTimeout())
        assert waiter.entry is not None
        waiter.future = asyncio.get_running_loop().create_future()
        self.waiting.requeue(waiter.entry)
        self._depth_changed(waiter.ticket.tenant)
        if waiter.timer is not None:
            waiter.timer.cancel()
        self._arm(waiter, remaining)

    def _leave(self, waiter: _Waiter) -> None:
        if waiter.entry is not None and waiter.entry.is_queued:
            self.waiting.remove(waiter.entry)
            self._depth_changed(waiter.ticket.tenant)
        elif waiter.is_granted:  # granted but never taken: the slot goes to the next waiter
            waiter.is_granted = False
            self.num_granted -= 1
            self.dispatch()

    def _refuse(self, ticket: Ticket, error: QueueRefused) -> QueueRefused:
        self.observer.count_queue_refusal(self.pool, ticket.tenant, error.reason)
        return error

    def _depth_changed(self, tenant: str) -> None:
        self.observer.set_queue_depth(self.pool, tenant, self.waiting.num_queued(tenant))


class SlotQueues:
    """The fair queues of the pools that have one, each woken by its pool's (and fallbacks') releases.

    A queue is made on a pool's first queued request; its settings come with each request (the policy
    it runs under), so a reload changes them for the requests that arrive after it.
    """

    def __init__(
        self,
        balancer: Balancer,
        *,
        observer: QueueObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
        call_later: CallLater = _loop_call_later,
    ) -> None:
        self.balancer = balancer
        self.observer = observer
        self.clock = clock
        self.call_later = call_later
        self.queues: dict[str, SlotQueue[ReplicaState]] = {}
        balancer.add_release_listener(self._released)

    def queue(self, pool: str) -> SlotQueue[ReplicaState]:
        queue = self.queues.get(pool)
        if queue is None:
            balancer = self.balancer
            queue = self.queues[pool] = SlotQueue(
                pool,
                free_slots=lambda: balancer.num_free_slots(balancer.pool_order(pool)),
                has_usable=lambda: balancer.has_usable(balancer.pool_order(pool)),
                clock=self.clock,
                call_later=self.call_later,
                observer=self.observer,
            )
        return queue

    async def take(
        self,
        pool: str,
        ticket: Ticket,
        config: QueueConfig,
        timeout_s: float,
        *,
        prefer: str | None = None,
        origin: str | None = None,
    ) -> ReplicaState | None:
        """A replica of ``pool`` or its fallbacks below its cap, once it is ``ticket``'s turn."""
        balancer = self.balancer
        order = balancer.pool_order(pool)

        def pick() -> ReplicaState | None:
            return balancer.pick_first(order, prefer=prefer, saturated_ok=False, origin=origin)

        return await self.queue(pool).take(ticket, config, timeout_s, pick)

    def _released(self, state: ReplicaState) -> None:
        for queue in self.queues.values():
            if queue.waiting and state.pool in self.balancer.pool_order(queue.pool):
                queue.dispatch()
