"""FailoverStore: what happens to rate limiting while Redis is down.

A small circuit breaker around the primary store. While the primary answers, every call goes to it.
When it raises ``StoreUnavailable`` the circuit opens for ``retry_interval_s``: during that time no
call waits on the primary again (so an outage costs one store timeout, not one per request), and

- ``fail_open``: calls go to the in-process fallback (limits then hold per process, not across
  replicas); ``on_fallback(operation)`` is called each time, for a metric; one warning is logged per
  outage on the ``sortyard.stores`` logger;
- ``fail_closed``: calls raise ``StoreUnavailable`` with ``retry_after_s`` set (the gateway answers 503).

After the interval one call probes the primary (the others keep using the fallback meanwhile); when
it answers the circuit closes, so recovery needs no restart. A request admitted by the fallback is
settled there too (its reservation and leases live there); the ledger it records there is added to
the primary's in ``usage``.

Each store's leases are unknown to the other, so a transition could let a key run up to twice its
``max_concurrent``: the fallback would grant it whole beside the requests Redis admitted that still
run, and Redis, once back, beside those the fallback let in. So until they end, the requests one store
admitted count against the other's grant: an admission goes to a store with every concurrency limit
lowered by the leases this process's requests hold in the other under the same scope
(``_LiveLeases``, one book per store), and the bound holds across both transitions.

A request the primary admitted is settled in the primary, in both modes: a settle it cannot take now
(it failed, or the circuit is open) is kept and handed to it again before anything else once it
answers (a probe, ``flush``, or every ``retry_interval_s`` by itself while any are kept), so its
leases, its reservation and its ledger entry are never lost to an outage. Settles are idempotent per
request id, so one that timed out but ran anyway counts once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import msgspec

from gateway.stores.base import Admission, Decision, Settlement, Store, StoreUnavailable, UsageReport

FailMode = Literal["fail_open", "fail_closed"]
T = TypeVar("T")

_MAX_TRACKED_IDS = 100_000  # fallback-admitted request ids awaiting their settle; settles kept


class _LiveLeases:
    """The requests one store admitted that have not ended, and the concurrency leases they hold there,
    per (tenant, scope). Counting per scope can wait until it is needed (``counting=False``): keeping
    the book is then one dict write per request and one pop, and ``start_counting`` adds it up once."""

    def __init__(self, *, counting: bool = True) -> None:
        self._by_id: dict[str, Admission] = {}
        self.held: dict[tuple[str, str], int] = {}
        self.counting = counting

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_id

    def add(self, admission: Admission) -> None:
        by_id = self._by_id
        by_id[admission.request_id] = admission
        if self.counting:
            self._count(admission, 1)
        if len(by_id) > _MAX_TRACKED_IDS:
            self.remove(next(iter(by_id)))

    def remove(self, request_id: str) -> None:
        admission = self._by_id.pop(request_id, None)
        if admission is not None and self.counting:
            self._count(admission, -1)

    def start_counting(self) -> None:
        self.counting = True
        self.held = {}
        for admission in self._by_id.values():
            self._count(admission, 1)

    def stop_counting(self) -> None:
        self.counting = False
        self.held = {}

    def _count(self, admission: Admission, step: int) -> None:
        held, tenant = self.held, admission.tenant
        for rule in admission.rules:
            if rule.max_concurrent is not None:
                scope = (tenant, rule.scope)
                left = held.get(scope, 0) + step
                if left:
                    held[scope] = left
                else:
                    del held[scope]

    def counted_against(self, admission: Admission) -> Admission:
        """``admission`` with each concurrency limit lowered by the leases held under it."""
        held, tenant = self.held, admission.tenant
        if not any((tenant, r.scope) in held for r in admission.rules if r.max_concurrent is not None):
            return admission
        rules = tuple(
            msgspec.structs.replace(r, max_concurrent=max(0, r.max_concurrent - held[(tenant, r.scope)]))
            if r.max_concurrent is not None and (tenant, r.scope) in held
            else r
            for r in admission.rules
        )
        return msgspec.structs.replace(admission, rules=rules)


class FailoverStore:
    """A primary store with a circuit breaker and a fallback (see the module docstring).

    Args:
        primary: the shared store (RedisStore).
        fallback: the local store used while the primary is down in ``fail_open`` mode (MemoryStore).
        mode: ``"fail_open"`` or ``"fail_closed"``.
        retry_interval_s: how long the circuit stays open before the primary is tried again.
        on_fallback: called with the operation name (``"admit"``, ``"settle"``) each time the fallback
            serves a call; hook a counter to it.
        clock: monotonic seconds (injected for tests).
    """

    def __init__(
        self,
        primary: Store,
        fallback: Store,
        *,
        mode: FailMode,
        retry_interval_s: float = 1.0,
        on_fallback: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in ("fail_open", "fail_closed"):
            raise ValueError(f"mode must be fail_open or fail_closed, not {mode!r}")
        self.primary = primary
        self.fallback = fallback
        self.mode = mode
        self.retry_interval_s = retry_interval_s
        self._on_fallback = on_fallback
        self._clock = clock
        self._open_until: float | None = None  # None: circuit closed
        self._probing = False
        self._fallback_leases = _LiveLeases()
        """Leases of the requests the fallback admitted, until they end (they count against Redis)."""
        self._primary_leases = _LiveLeases(counting=False)
        """Leases of the requests the primary admitted, until they end (they count against the fallback;
        added up only while it serves)."""
        self._unsettled: OrderedDict[str, Settlement] = OrderedDict()
        """Settles of requests the primary admitted, kept until it answers again."""
        self._recovery: asyncio.Task[None] | None = None
        self._closed = False
        self._log = logging.getLogger("sortyard.stores")

    @property
    def is_degraded(self) -> bool:
        """True while the circuit is open (the primary is considered down)."""
        return self._open_until is not None

    async def admit(self, admission: Admission) -> Decision:
        try:
            if self._open_until is None and not self._unsettled and not self._fallback_leases.held:
                try:  # the common case, without a closure
                    decision = await self.primary.admit(admission)
                except StoreUnavailable as exc:
                    self._trip(exc)
                    raise
            else:
                counted = self._fallback_leases.counted_against(admission)
                decision = await self._on_primary(lambda: self.primary.admit(counted))
            if decision.allowed and admission.request_id:  # no id: a bare hit, nothing to settle
                self._primary_leases.add(admission)
            return decision
        except StoreUnavailable:
            if self.mode == "fail_closed":
                raise
        if not self._primary_leases.counting:  # the outage's first fallback admission
            self._primary_leases.start_counting()
        counted = self._primary_leases.counted_against(admission)
        decision = await self._use_fallback("admit", lambda: self.fallback.admit(counted))
        if decision.allowed and admission.request_id:
            self._fallback_leases.add(admission)
        return decision

    async def settle(self, settlement: Settlement) -> None:
        if settlement.request_id in self._fallback_leases:  # admitted by the fallback: settle it there
            self._fallback_leases.remove(settlement.request_id)
            await self._use_fallback("settle", lambda: self.fallback.settle(settlement))
            return
        self._primary_leases.remove(settlement.request_id)  # it ended, whenever Redis hears of it
        if self._open_until is None:
            try:
                await self.primary.settle(settlement)
                return
            except StoreUnavailable as exc:
                self._trip(exc)
        # admitted by the primary, which cannot take it now: kept for when it answers
        self._unsettled[settlement.request_id] = settlement
        self._start_recovery()
        while len(self._unsettled) > _MAX_TRACKED_IDS:
            _, dropped = self._unsettled.popitem(last=False)
            await self._drop(dropped)

    async def _drop(self, settlement: Settlement) -> None:
        """A kept settle past the bound: its leases and reservation in the primary age out on their own;
        under fail_open its ledger entry is kept locally."""
        if self.mode == "fail_closed":
            self._log.warning("settle of request %s dropped: too many kept", settlement.request_id)
            return
        ledger_only = Settlement(
            tenant=settlement.tenant,
            request_id=settlement.request_id,
            rules=(),
            budgets=settlement.budgets,
            reserved_tokens=0,
            reserved_at_s=settlement.reserved_at_s,
            input_tokens=settlement.input_tokens,
            output_tokens=settlement.output_tokens,
            cost_usd=settlement.cost_usd,
            pool=settlement.pool,
            key_id=settlement.key_id,
            month=settlement.month,
            now_s=settlement.now_s,
        )
        await self._use_fallback("settle", lambda: self.fallback.settle(ledger_only))

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        report = await self._on_primary(lambda: self.primary.usage(month, tenant))
        return report.merged(await self.fallback.usage(month, tenant))

    async def ping(self) -> bool:
        return await self.primary.ping()

    async def flush(self) -> None:
        """Hand the primary the settles kept for it, then have it write what it holds back."""
        await self._on_primary(self.primary.flush)

    async def close(self) -> None:
        self._closed = True
        if self._recovery is not None:
            self._recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery
        if self._unsettled:
            with contextlib.suppress(StoreUnavailable):
                await self._on_primary(self.primary.flush)
        if self._unsettled:
            self._log.warning("closing with %d settles Redis never took", len(self._unsettled))
        await self.primary.close()
        await self.fallback.close()

    # ---- settles kept for the primary -----------------------------------------------------------

    async def _replay(self) -> None:
        """Hand the kept settles to the primary (one loop turn: they share its writes); raise
        StoreUnavailable, keeping those it did not take, when it fails."""
        kept, self._unsettled = self._unsettled, OrderedDict()
        results = await asyncio.gather(
            *(self.primary.settle(s) for s in kept.values()), return_exceptions=True
        )
        failure: BaseException | None = None
        for settlement, result in zip(kept.values(), results, strict=True):
            if isinstance(result, BaseException):
                self._unsettled[settlement.request_id] = settlement
                failure = failure or result
        if failure is not None:
            self._start_recovery()
            raise failure

    def _start_recovery(self) -> None:
        if (self._recovery is None or self._recovery.done()) and not self._closed:
            self._recovery = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """While settles are kept: every ``retry_interval_s``, probe the primary with them (no request
        needs to come for them to be written)."""
        while self._unsettled:
            await asyncio.sleep(self.retry_interval_s)
            try:
                await self._on_primary(self.primary.flush)
            except StoreUnavailable:
                pass  # still down: kept
            except Exception:  # a bug must not stop the next try
                self._log.exception("handing kept settles to the rate-limit store failed")

    # ---- the breaker ----------------------------------------------------------------------------

    async def _on_primary(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` on the primary unless the circuit is open; open it on StoreUnavailable."""
        if self._open_until is not None:
            now = self._clock()
            if now < self._open_until or self._probing:
                wait_s = max(0.0, self._open_until - now) or self.retry_interval_s
                raise StoreUnavailable(retry_after_s=wait_s)
            self._probing = True  # this call probes; the others keep to the fallback meanwhile
        try:
            if self._unsettled:  # before anything else: leases they hold must not deny this call
                await self._replay()
            result = await call()
        except StoreUnavailable as exc:
            self._trip(exc)
            raise
        finally:
            self._probing = False
        if self._open_until is not None:
            self._open_until = None
            self._primary_leases.stop_counting()
            self._log.warning("rate-limit store is back; leaving %s mode", self.mode)
        return result

    def _trip(self, exc: StoreUnavailable) -> None:
        if self._open_until is None:
            self._log.warning(
                "rate-limit store unavailable (%s); %s until it answers (retrying every %.1fs)",
                exc,
                self.mode,
                self.retry_interval_s,
            )
        self._open_until = self._clock() + self.retry_interval_s

    async def _use_fallback(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        if self._on_fallback is not None:
            self._on_fallback(operation)
        return await call()
