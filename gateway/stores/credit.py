"""CreditStore: most requests admitted and settled without a Redis round trip, limits still exact.

Every request used to cost two EVALSHAs, one to admit and one to settle. Under load that was the
largest part of what limits cost a gateway replica. CreditStore, in front of a RedisStore, keeps both
off the hot path and gives up nothing the store promises:

- **Credit.** When Redis admits a request, ``admit.lua`` also takes *credit* beyond it: requests and
  tokens charged to the same one-second bucket the request was charged to, and spare lease slots
  (``<request id>#<n>``) in the concurrency sets. This replica then admits the next requests of those
  keys by spending credit locally. What Redis holds (used + credit) never exceeds a limit, so neither
  does what every replica together admits. A request admitted from credit counts in the bucket of
  the second it was admitted in, as it would have through Redis.
- **Shrinking credit.** A grant is at most a sixteenth of the room left in the limit, and none on
  limits under 64. Credit shrinks to nothing as a limit fills up, and near a limit every request goes
  to Redis, one by one, as before. Three replicas sharing a 300-per-minute key admit exactly 300.
- **Credit goes back** (``credit_book.py`` keeps it). Window credit is good only in its own second.
  Once that second is over, what is left is handed back to its bucket within ``flush_interval_s``.
  Spare lease slots go back after ``slot_idle_s`` unused. Before this replica asks Redis about a key,
  it first hands back everything it holds on that key, so its own credit never hides room from its
  own request.
- **Batched settles.** A settle is local: the ledger increments, the change from reserved to real tokens,
  and the lease release are summed per tenant and written every ``flush_interval_s`` in one
  ``flush.lua`` call. A token reservation settled within its own second goes straight back into
  credit. A request's lease slot becomes a spare slot for the next request.
- **Budgets.** Redis reports how much of the tightest monthly budget is left; a replica spends a
  sixteenth of it at most on local admits, and near the budget every request asks Redis and every
  settle is written at once (``budget_share.py``).

Usage reports (``usage``) flush first. Another replica's settles show up within its flush interval.
If Redis is down, settles stay pending and are written once it answers again (``writeback.py``: a
write is applied once, even one that timed out here and ran when Redis resumed). Admits that need
Redis raise ``StoreUnavailable`` as before, and the FailoverStore around this one decides what
happens. The first failure drops all credit (it is handed back once Redis answers). Until then, at
most the rest of the current second, requests already paid for in Redis are still admitted from
credit. An admit that failed may still run when Redis resumes: its lease and spare slots
(``<id>``, ``<id>#1``...) are released by the next write, which Redis runs after it.

Leases in use are renewed while their requests run (``leases.py``): a replica that dies or loses
Redis frees them within ``RedisStore.lease_expiry_s``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from gateway.stores.base import (
    WINDOW_S,
    Admission,
    Decision,
    LimitRule,
    Settlement,
    StoreUnavailable,
    UsageReport,
)
from gateway.stores.budget_share import BudgetShares
from gateway.stores.credit_book import CreditBook
from gateway.stores.credit_plan import CreditPlan
from gateway.stores.leases import LeaseBook
from gateway.stores.pending import PendingWrites
from gateway.stores.redis import RedisStore
from gateway.stores.writeback import WriteBack

logger = logging.getLogger("sortyard.stores")

_MAX_SETTLED_IDS = 8192
_CREDITED = ("requests", "tokens", "concurrency")
"""Denials that credit (window units, spare lease slots) can answer."""


class CreditStore:
    """The Store protocol over a RedisStore, admitting from local credit (see the module docstring).

    Args:
        redis: the shared store; its scripts take and take back the credit.
        clock: Unix seconds, for handing back credit when no request comes (admissions and settles
            carry their own times; replicas must share the clock's epoch).
        flush_interval_s: how often settles are written and spent seconds' credit handed back.
        slot_idle_s: how long a spare lease slot is kept unused before it goes back.
        want_requests: requests of credit asked for per admit that reaches Redis.
        want_token_requests: token credit asked for, in multiples of the request's reservation.
        want_slots: spare lease slots asked for.
    """

    def __init__(
        self,
        redis: RedisStore,
        *,
        clock: Callable[[], float] = time.time,
        flush_interval_s: float = 0.05,
        slot_idle_s: float = 0.25,
        want_requests: int = 128,
        want_token_requests: int = 128,
        want_slots: int = 8,
    ) -> None:
        self.redis = redis
        self._clock = clock
        self._flush_interval_s = flush_interval_s
        self._want = (want_requests, want_token_requests, want_slots)
        self._leases = LeaseBook(redis.lease_expiry_s)
        """Request id -> its leases, renewed while it runs."""
        self._plans: dict[tuple[str, str, tuple[LimitRule, ...]], CreditPlan] = {}
        """(tenant, month, rules) -> its keys, checks and last answer from Redis."""
        self._budgets = BudgetShares()
        """Each tenant's budget room at Redis's last answer, and this replica's share of it."""
        self._writes = WriteBack(redis, on_failure=self._drop_credit)
        self._credit = CreditBook(self._writes, slot_idle_s=slot_idle_s)
        """Window credit and spare lease slots held."""
        self._asking: dict[tuple[str, str, tuple[LimitRule, ...]], asyncio.Future[bool]] = {}
        """Rule sets with a credit request on its way to Redis -> done when it is answered."""
        self._settled: dict[str, None] = {}
        """Recently settled request ids (a repeat settle is a no-op)."""
        self._ticker: asyncio.Task[None] | None = None
        self._flush_failed = False
        self._closed = False

    # ---- admit -----------------------------------------------------------------------------

    async def admit(self, admission: Admission) -> Decision:
        plan = self._plans.get((admission.tenant, admission.month, admission.rules))
        if plan is None:
            plan = self._plan(admission)
        if plan.snapshot is not None:
            decision = self._admit_locally(admission, plan)
            if decision is not None:
                return decision
        return await self._admit_in_redis(admission, plan)

    def _plan(self, admission: Admission) -> CreditPlan:
        key_names, checks = self.redis.layouts.admit(admission.tenant, admission.month, admission.rules)
        plan = CreditPlan(key_names, checks)
        if len(self._plans) >= 4096:  # tenants x months x rule sets
            self._plans.clear()
        self._plans[(admission.tenant, admission.month, admission.rules)] = plan
        return plan

    def _admit_locally(self, admission: Admission, plan: CreditPlan) -> Decision | None:
        now = admission.now_s
        cur = math.floor(now)
        if admission.budgets and not self._budgets.may_admit(
            admission.tenant, admission.month, admission.budgets, cur
        ):
            return None
        reserve = admission.reserve_tokens
        # a spare slot serves a request only with two thirds of a fresh lease's life left: the next
        # renewal comes before it ends
        reuse_by = now + self._leases.ttl_s(admission.lease_ttl_s) - self._leases.renew_every_s
        if not self._credit.can_spend(plan.local, cur, reserve, reuse_by):
            return None
        held, expiry = self._credit.spend(plan.local, reserve)
        if held:
            until = now + admission.lease_ttl_s
            self._leases.hold(admission.request_id, admission.tenant, held, expiry_s=expiry, until_s=until)
        snapshot = plan.snapshot
        assert snapshot is not None
        snapshot[1] += 1
        snapshot[2] += reserve
        last: Decision = snapshot[0]
        fresh = cur + WINDOW_S + 1 - now  # what this request took leaves the window then
        return Decision(
            allowed=True,
            limit_requests=last.limit_requests,
            remaining_requests=None
            if last.remaining_requests is None
            else max(0, last.remaining_requests - snapshot[1]),
            reset_requests_s=None if last.limit_requests is None else fresh,
            limit_tokens=last.limit_tokens,
            remaining_tokens=None
            if last.remaining_tokens is None
            else max(0, last.remaining_tokens - snapshot[2]),
            reset_tokens_s=None if last.limit_tokens is None else fresh,
        )

    async def _admit_in_redis(self, admission: Admission, plan: CreditPlan) -> Decision:
        tenant = admission.tenant
        asked = self._asking.get((tenant, admission.month, admission.rules))
        if asked is not None:
            # credit for this rule set is on its way: wait for it rather than ask Redis alongside
            if not await asyncio.shield(asked):
                # Redis did not answer it: asking again would make this request wait a second
                # timeout, past the store's promise (store.timeout_s)
                raise StoreUnavailable(
                    "rate-limit store unavailable (a credit request beside this one failed)"
                )
            if plan.snapshot is not None and (decision := self._admit_locally(admission, plan)):
                return decision
        # hand back what this replica holds on these keys first: its credit must not deny its own request
        self._credit.hand_back_keys(tenant, plan.local)
        # the tenant's pending settles go first, in the same write: Redis sees the spend and room
        # they hold before it judges this request (a write that fails is kept and sent again)
        flushed = self._flush_soon(tenant)
        # one credit request at a time per rule set: sixteen admits missing credit at once must not
        # each take a sixteenth of the room
        asking = (tenant, admission.month, admission.rules)
        want = None
        answered: asyncio.Future[bool] | None = None
        is_unavailable = False
        if asking not in self._asking:
            want = (self._want[0], self._want[1] * admission.reserve_tokens, self._want[2])
            answered = self._asking[asking] = asyncio.get_running_loop().create_future()
        try:
            decision, room, grants = await self.redis.admit_with_credit(admission, want)
        except StoreUnavailable:
            is_unavailable = True
            self._drop_credit()  # no credit spent while Redis is away
            self._release_after_failure(admission, plan, num_slots=want[2] if want else 0)
            raise
        finally:
            if answered is not None:
                del self._asking[asking]
                answered.set_result(not is_unavailable)  # cancelled: the others ask
        # before any await: the credit granted is there for the requests whose answers come next
        decision = self._answered(admission, plan, decision, room, grants)
        if flushed is not None:
            await flushed  # done before this request's next call (a NOSCRIPT retry may trail the admit)
        return decision

    def _answered(
        self,
        admission: Admission,
        plan: CreditPlan,
        decision: Decision,
        room: float | None,
        grants: list[int],
    ) -> Decision:
        """Take what Redis granted with an admit; the decision for the request."""
        if not decision.allowed:
            # Redis counted the credit a request beside this one took for this replica (its reply came
            # first): that credit serves this one, so this replica's credit never denies its own request
            if decision.reason in _CREDITED and plan.snapshot is not None:
                return self._admit_locally(admission, plan) or decision
            return decision
        tenant, now, request_id = admission.tenant, admission.now_s, admission.request_id
        cur = math.floor(now)
        expiry = now + self._leases.ttl_s(admission.lease_ttl_s)  # as admit.lua wrote it
        held = self._credit.add_grants(
            tenant, plan, grants, request_id=request_id, now_s=now, expiry_s=expiry
        )
        if held:
            until = now + admission.lease_ttl_s
            self._leases.hold(request_id, tenant, held, expiry_s=expiry, until_s=until)
        plan.snapshot = [decision, 0, 0]
        if room is not None:
            self._budgets.answered(tenant, admission.month, admission.budgets, cur, room)
        self._start_ticker()
        return decision

    def _release_after_failure(self, admission: Admission, plan: CreditPlan, *, num_slots: int) -> None:
        """An admit that failed may still run when Redis resumes: its lease and the spare slots it asked
        for are released by the next write, which Redis runs after it (the same connection)."""
        request_id = admission.request_id
        members = [request_id, *(f"{request_id}#{n}" for n in range(1, num_slots + 1))]
        pending = self._pending_of(admission.tenant)
        for kind, key in plan.local:
            if kind == 3:
                pending.add_release(key, members)
        self._start_ticker()

    # ---- settle ----------------------------------------------------------------------------

    async def settle(self, settlement: Settlement) -> None:
        request_id = settlement.request_id
        settled = self._settled
        if request_id in settled:
            return
        settled[request_id] = None
        if len(settled) > 2 * _MAX_SETTLED_IDS:  # keep the newest, trimmed in bulk (cheaper per settle)
            self._settled = dict.fromkeys(list(settled)[-_MAX_SETTLED_IDS:])
        tenant = settlement.tenant
        pending = self._pending_of(tenant)
        cost = float(settlement.cost_usd)
        pending.add_usage(
            settlement.month,
            settlement.key_id,
            settlement.pool,
            settlement.input_tokens,
            settlement.output_tokens,
            cost,
        )
        is_near_budget = bool(cost and settlement.budgets) and self._budgets.settled(
            tenant, settlement.month, cost
        )

        now = settlement.now_s if settlement.now_s is not None else self._clock()
        delta = settlement.input_tokens + settlement.output_tokens - settlement.reserved_tokens
        bucket = math.floor(settlement.reserved_at_s)
        if delta and bucket >= math.floor(now) - WINDOW_S:
            plan = self._plans.get((tenant, settlement.month, settlement.rules))
            token_keys = plan.token_keys if plan is not None else self._token_keys(tenant, settlement.rules)
            self._credit.adjust_tokens(tenant, token_keys, bucket, delta)

        held = self._leases.release(request_id)
        if held is not None:
            self._credit.return_leases(tenant, held, now)
        if is_near_budget:  # every replica asks Redis here: the spend must be there for its next admit
            flushed = self._flush_soon(tenant)
            if flushed is not None:
                await flushed
        self._start_ticker()

    def _token_keys(self, tenant: str, rules: tuple[LimitRule, ...]) -> list[str]:
        keys = self.redis.keys
        return [keys.tokens(tenant, rule.scope) for rule in rules if rule.tokens_per_minute is not None]

    # ---- flushing --------------------------------------------------------------------------

    def _pending_of(self, tenant: str) -> PendingWrites:
        return self._writes.of(tenant)

    def _flush_soon(self, tenant: str) -> asyncio.Future[list[Any]] | None:
        """Queue the tenant's writes now (ahead of any Redis call after it)."""
        return self._writes.send_soon(tenant, self._clock())

    def _drop_credit(self) -> None:
        """Redis failed: hand all credit back, and no lease held now becomes a spare slot (it may be gone
        from Redis by the time its request ends)."""
        self._credit.hand_back(self._clock(), everything=True)
        self._leases.unpool()

    async def flush(self) -> None:
        """Write every tenant's settles, spent credit and lease renewals now (raises StoreUnavailable
        when Redis does not answer: what it did not take is kept)."""
        now = self._clock()
        self._credit.hand_back(now)
        self._writes.add_renewals(self._leases.renewals(now))
        await self._writes.flush(now)

    def _start_ticker(self) -> None:
        if self._ticker is None and not self._closed:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            # while Redis fails, once a second: each try queues the writes kept again on a stalled socket
            await asyncio.sleep(
                max(self._flush_interval_s, 1.0) if self._flush_failed else self._flush_interval_s
            )
            try:
                await self.flush()
            except StoreUnavailable as exc:
                if not self._flush_failed:
                    logger.warning("could not write settled usage: %s; keeping it until Redis answers", exc)
                self._flush_failed = True
            except Exception:  # a bug must not stop every later flush
                logger.exception("flushing settled usage failed")
            else:
                if self._flush_failed:
                    logger.warning("settled usage written again")
                self._flush_failed = False

    # ---- the rest of the protocol ----------------------------------------------------------

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        await self.flush()
        return await self.redis.usage(month, tenant)

    async def ping(self) -> bool:
        return await self.redis.ping()

    async def close(self) -> None:
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
            self._ticker = None
        self._credit.hand_back(self._clock(), everything=True)
        try:
            await self.flush()
        except StoreUnavailable as exc:
            logger.warning("closing with settled usage not written: %s", exc)
        await self.redis.close()
