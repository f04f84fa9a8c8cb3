"""Who goes next among waiting requests: priority classes first, then weighted fair share by tenant.

Within one priority class this is start-time fair queuing (Goyal, Vin and Cheng, 1996) over tenants:
a request is tagged ``start = max(V, its tenant's finish tag)`` and moves its tenant's finish tag on by
``1 / weight``; the queued request with the smallest start tag goes next (ties: the earlier arrival)
and the class's virtual time ``V`` becomes its tag. A tenant that floods the queue walks its own tags
far ahead of ``V``, so another tenant's next request (tagged near ``V``) goes before most of that
backlog; backlogged tenants get turns in proportion to their weights; a tenant's own requests keep
their order. Classes are strict: lower ``priority`` values go first (engines run them first too), and
a class waits while a more urgent one has requests queued (the queue's wait limit bounds that).

A request served without waiting (the pool had room) is charged with :meth:`FairQueue.charge`, so a
tenant that holds every slot when the pool saturates does not also head the queue. A class whose last
queued request leaves starts afresh, as SFQ does when a busy period ends: a tenant is never held back
for what it was served before the queue last emptied. Everything is O(log n) per request but
``pop``'s walk over the (few) classes; nothing here awaits or reads a clock.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Entry", "FairQueue"]

T = TypeVar("T")

_COMPACT_MIN = 32
"""Removed entries stay in a class's heap until popped; past this many (and half the heap) it is rebuilt."""
_PRUNE_AT = 64
"""Tenants' tags a class with nothing queued keeps from charges; past it only the latest stays."""


@dataclass(slots=True, eq=False)
class Entry(Generic[T]):
    """One queued request: its item, tenant, class and fair-queuing tags."""

    item: T
    tenant: str
    priority: int
    start: float
    """Its virtual start tag: it goes before every entry of its class with a larger one."""
    finish: float
    """Its tenant's finish tag once it was queued (``start + 1 / weight``)."""
    seq: int
    """Arrival order, for ties."""
    is_queued: bool = True


@dataclass(slots=True)
class _Class(Generic[T]):
    """One priority class: its heap of ``(start, seq, entry)``, virtual time and tenants' finish tags."""

    heap: list[tuple[float, int, Entry[T]]] = field(default_factory=list)
    virtual_time: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)
    num_queued: int = 0
    num_removed: int = 0
    """Entries removed while queued, still in the heap."""


class FairQueue(Generic[T]):
    """Priority classes, then start-time fair queuing among tenants, first come first served per tenant."""

    def __init__(self) -> None:
        self._classes: dict[int, _Class[T]] = {}
        self._by_tenant: dict[str, int] = {}
        self._num_queued = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._num_queued

    def num_queued(self, tenant: str) -> int:
        """The tenant's requests in the queue now (every class)."""
        return self._by_tenant.get(tenant, 0)

    def push(self, item: T, tenant: str, *, priority: int = 0, weight: float = 1.0) -> Entry[T]:
        """Queue ``item`` for ``tenant`` in class ``priority``; ``weight`` is the tenant's share (> 0)."""
        klass = self._class(priority)
        start = self._tag(klass, tenant, weight)
        entry = Entry(item, tenant, priority, start, klass.finish[tenant], next(self._seq))
        self._insert(klass, entry)
        return entry

    def charge(self, tenant: str, *, priority: int = 0, weight: float = 1.0) -> None:
        """Count a request served without queueing, as if it had been queued and popped at once."""
        klass = self._class(priority)
        klass.virtual_time = self._tag(klass, tenant, weight)
        if not klass.num_queued and len(klass.finish) > _PRUNE_AT:  # many tenants, none waiting: bounded
            klass.finish = {tenant: klass.finish[tenant]}

    def pop(self) -> Entry[T] | None:
        """The next entry (out of the queue now), or None when nothing is queued."""
        for priority in sorted(self._classes):  # a handful of classes at most
            klass = self._classes[priority]
            while klass.num_queued:
                _, _, entry = heapq.heappop(klass.heap)
                if not entry.is_queued:  # removed earlier
                    klass.num_removed -= 1
                    continue
                self._take_out(klass, entry)
                klass.virtual_time = max(klass.virtual_time, entry.start)
                self._forget_idle(priority, klass)
                return entry
        return None

    def peek(self) -> Entry[T] | None:
        """The entry ``pop`` would return next (still queued), or None when nothing is queued."""
        for priority in sorted(self._classes):
            klass = self._classes[priority]
            while klass.num_queued:
                entry = klass.heap[0][2]
                if entry.is_queued:
                    return entry
                heapq.heappop(klass.heap)  # removed earlier: drop it now, as pop would
                klass.num_removed -= 1
        return None

    def requeue(self, entry: Entry[T]) -> None:
        """Put a popped entry back with its tags unchanged: it heads its class again."""
        if not entry.is_queued:
            entry.is_queued = True
            klass = self._class(entry.priority)
            if not klass.num_queued:  # the class started afresh meanwhile: newcomers tag from here
                klass.virtual_time = max(klass.virtual_time, entry.start)
            self._insert(klass, entry)

    def remove(self, entry: Entry[T]) -> None:
        """Take a queued entry out (it timed out or its client left); a no-op when it is not queued."""
        if not entry.is_queued:
            return
        klass = self._classes[entry.priority]
        self._take_out(klass, entry)
        klass.num_removed += 1
        if klass.finish.get(entry.tenant) == entry.finish:  # its tenant's latest: hand the share back
            klass.finish[entry.tenant] = entry.start
        if klass.num_removed > _COMPACT_MIN and klass.num_removed * 2 > len(klass.heap):
            klass.heap = [item for item in klass.heap if item[2].is_queued]
            heapq.heapify(klass.heap)
            klass.num_removed = 0
        self._forget_idle(entry.priority, klass)

    # -- inside

    def _class(self, priority: int) -> _Class[T]:
        klass = self._classes.get(priority)
        if klass is None:
            klass = self._classes[priority] = _Class[T]()
        return klass

    @staticmethod
    def _tag(klass: _Class[T], tenant: str, weight: float) -> float:
        start = max(klass.virtual_time, klass.finish.get(tenant, 0.0))
        klass.finish[tenant] = start + 1.0 / weight
        return start

    def _insert(self, klass: _Class[T], entry: Entry[T]) -> None:
        heapq.heappush(klass.heap, (entry.start, entry.seq, entry))
        klass.num_queued += 1
        self._num_queued += 1
        self._by_tenant[entry.tenant] = self._by_tenant.get(entry.tenant, 0) + 1

    def _take_out(self, klass: _Class[T], entry: Entry[T]) -> None:
        entry.is_queued = False
        klass.num_queued -= 1
        self._num_queued -= 1
        left = self._by_tenant[entry.tenant] - 1
        if left:
            self._by_tenant[entry.tenant] = left
        else:
            del self._by_tenant[entry.tenant]

    def _forget_idle(self, priority: int, klass: _Class[T]) -> None:
        """A class with nothing queued goes: the busy period is over, every tenant starts even."""
        if not klass.num_queued:
            del self._classes[priority]
