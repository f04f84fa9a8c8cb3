"""WriteBack: what a replica owes Redis, per tenant, until Redis has taken it.

Settles, credit handed back, lease renewals and releases are summed per tenant in a ``PendingWrites``
and sent as one ``lua/flush.lua`` call. A write that fails (Redis did not answer in time) is kept as
it is and sent again, under the same write id, until Redis takes it. It is never merged into newer
writes: a write that timed out here may still run when a stalled Redis resumes, and flush.lua
applies each id once, so it counts once either way.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from gateway.stores.base import StoreUnavailable
from gateway.stores.key_names import KeySpace
from gateway.stores.pending import PendingWrites


class FlushTarget(Protocol):
    """Where the writes go: ``gateway.stores.redis.RedisStore``."""

    keys: KeySpace
    ledger_ttl_s: int

    def flush_soon(self, keys: Sequence[str], spec: bytes) -> Awaitable[Any]: ...


_MAX_UNSENT = 8
"""Writes kept per tenant while Redis is away; past that, newer settles wait in the pending sum."""

Write = tuple[list[str], bytes]


class WriteBack:
    """Per-tenant writes owed to Redis (see the module docstring).

    Args:
        redis: where the writes go (``RedisStore.flush_soon``).
        on_failure: called when a write fails (CreditStore drops its credit then).
    """

    def __init__(self, redis: FlushTarget, *, on_failure: Callable[[], None] | None = None) -> None:
        self._redis = redis
        self._on_failure = on_failure
        self._pending: dict[str, PendingWrites] = {}
        self._unsent: dict[str, list[Write]] = {}
        """Tenant -> writes that failed, to send again as they are."""
        self._id_prefix = os.urandom(6).hex()
        self._ids = itertools.count(1)

    def of(self, tenant: str) -> PendingWrites:
        """The tenant's writes not sent yet (add to it)."""
        pending = self._pending.get(tenant)
        if pending is None:
            pending = self._pending[tenant] = PendingWrites()
        return pending

    def owed(self) -> dict[str, int]:
        """Tenant -> writes not taken by Redis yet (the pending sum counts as one)."""
        owed = {tenant: len(writes) for tenant, writes in self._unsent.items() if writes}
        for tenant, pending in self._pending.items():
            if not pending.empty():
                owed[tenant] = owed.get(tenant, 0) + 1
        return owed

    def add_renewals(self, renewals: dict[str, dict[str, dict[str, float]]]) -> None:
        """``LeaseBook.renewals()``: tenant -> lease set -> member -> new expiry."""
        for tenant, sets in renewals.items():
            pending = self.of(tenant)
            for key, members in sets.items():
                pending.add_renew(key, members)

    def send_soon(self, tenant: str, now_s: float) -> asyncio.Future[list[Any]] | None:
        """Queue the tenant's writes now, ahead of any Redis call made after this one: those that failed
        before, then what is pending. The result lists each write's reply or exception (a write that
        failed is kept); nobody needs to await it."""
        writes = self._unsent.pop(tenant, [])
        pending = self._pending.pop(tenant, None)
        if pending is not None and not pending.empty():
            if len(writes) < _MAX_UNSENT:
                write_id = f"{self._id_prefix}:{next(self._ids)}"
                writes.append(
                    pending.spec(
                        tenant, self._redis.keys, self._redis.ledger_ttl_s, now_s=now_s, write_id=write_id
                    )
                )
            else:
                self._pending[tenant] = pending  # the older writes go first
        if not writes:
            return None
        sent: list[asyncio.Future[Any]] = []
        for write in writes:
            future = asyncio.ensure_future(self._redis.flush_soon(*write))
            # kept on failure whoever awaits it, even a caller that is gone (cancelled)
            future.add_done_callback(functools.partial(self._sent, tenant, write))
            sent.append(future)
        return asyncio.gather(*sent, return_exceptions=True)

    def _sent(self, tenant: str, write: Write, done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is None:
            return
        self._unsent.setdefault(tenant, []).append(write)
        if self._on_failure is not None:
            self._on_failure()

    async def flush(self, now_s: float) -> None:
        """Send every tenant's writes now; StoreUnavailable when Redis did not take them all (kept)."""
        for _ in range(2):  # a second round for what waited behind writes sent again
            tenants = [*self._unsent, *(t for t in self._pending if t not in self._unsent)]
            sent = [queued for tenant in tenants if (queued := self.send_soon(tenant, now_s))]
            if not sent:
                return
            # queued in one loop turn: one write to Redis for every tenant
            for results in await asyncio.shield(asyncio.gather(*sent)):
                for result in results:
                    if isinstance(result, StoreUnavailable):
                        raise result
                    if isinstance(result, BaseException):
                        raise StoreUnavailable(f"rate-limit store write failed: {result!r}")
