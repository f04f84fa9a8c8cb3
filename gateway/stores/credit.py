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
- **Credit goes back.** Window credit is good only in its own second. Once that second is over, what
  is left is handed back to its bucket within ``flush_interval_s``. Spare lease slots go back after
  ``slot_idle_s`` unused. Before this replica asks Redis about a key, it first hands back everything
  it holds on that key, so its own credit never hides room from its own request.
- **Batched settles.** A settle is local: the ledger increments, the change from reserved to real tokens,
  and the lease release are summed per tenant and written every ``flush_interval_s`` in one
  ``flush.lua`` call. A token reservation settled within its own second goes straight back into
  credit. A request's lease slot becomes a spare slot for the next request.
- **Budgets.** Redis reports how much of the tightest monthly budget is left. For the rest of that second,
  requests are admitted locally only while that room, less the cost this replica settled since, is
  above zero. Spend is only known at settle time in any case.

Usage reports (``usage``) flush first. Another replica's settles show up within its flush interval.
If Redis is down, settles stay pending and are written once it answers again. Admits that need Redis
raise ``StoreUnavailable`` as before, and the FailoverStore around this one decides what happens.
The first failure drops all credit (it is handed back once Redis answers). Until then, at most the
rest of the current second, requests already paid for in Redis are still admitted from credit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from gateway.stores.base import (
    WINDOW_S,
    Admission,
    BudgetRule,
    Decision,
    LimitRule,
    Settlement,
    StoreUnavailable,
    UsageReport,
)
from gateway.stores.redis import RedisStore

logger = logging.getLogger("switchyard.stores")

_json = msgspec.json.Encoder().encode

MIN_POOLED_LIMIT = 64
"""Lease slots are kept as spares only under concurrency limits this large (admit.lua grants none below)."""
REUSE_MARGIN_S = 10.0
"""A spare slot serves a new request only while it outlives that request's lease by this little at most."""
_MAX_SETTLED_IDS = 16384
_MAX_PENDING_RELEASES = 10000


class _Pending:
    """What one tenant's settles and refunds left to write."""

    __slots__ = ("adjust", "floats", "ints", "release")

    def __init__(self) -> None:
        self.ints: dict[tuple[str, str], int] = {}
        """(ledger key, field) -> amount."""
        self.floats: dict[tuple[str, str], float] = {}
        self.adjust: dict[tuple[str, int], int] = {}
        """(window key, bucket second) -> change."""
        self.release: dict[str, list[str]] = {}
        """Lease set -> members to remove."""

    def empty(self) -> bool:
        return not (self.ints or self.floats or self.adjust or self.release)

    def add_adjust(self, key: str, bucket: int, delta: int) -> None:
        self.adjust[(key, bucket)] = self.adjust.get((key, bucket), 0) + delta

    def add_release(self, key: str, members: Sequence[str]) -> None:
        held = self.release.setdefault(key, [])
        if len(held) < _MAX_PENDING_RELEASES:  # past that, the leases' own expiry frees them
            held.extend(members)

    def merge(self, other: _Pending) -> None:
        """Take back a flush that failed (``other`` is older than what piled up since)."""
        for field, amount in other.ints.items():
            self.ints[field] = self.ints.get(field, 0) + amount
        for field, value in other.floats.items():
            self.floats[field] = self.floats.get(field, 0.0) + value
        for (key, bucket), delta in other.adjust.items():
            self.add_adjust(key, bucket, delta)
        for key, members in other.release.items():
            self.add_release(key, members)

    def spec(self, ledger_ttl_s: int) -> tuple[list[str], bytes]:
        """The KEYS and the ARGV of one ``flush.lua`` call."""
        keys: list[str] = []
        numbers: dict[str, int] = {}

        def number(key: str) -> int:
            n = numbers.get(key)
            if n is None:
                keys.append(key)
                n = numbers[key] = len(keys)
            return n

        ledgers: dict[str, tuple[dict[str, int], dict[str, str]]] = {}
        for (ledger, field), amount in self.ints.items():
            ledgers.setdefault(ledger, ({}, {}))[0][field] = amount
        for (ledger, field), value in self.floats.items():
            ledgers.setdefault(ledger, ({}, {}))[1][field] = repr(value)  # HINCRBYFLOAT: every digit
        spec: dict[str, Any] = {
            "ledger_ttl": ledger_ttl_s,
            "ledgers": [[number(ledger), ints, floats] for ledger, (ints, floats) in ledgers.items()],
            "adjust": [[number(key), bucket, delta] for (key, bucket), delta in self.adjust.items() if delta],
            "release": [[number(key), *members] for key, members in self.release.items() if members],
        }
        return keys, _json(spec)


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
        want_requests: int = 64,
        want_token_requests: int = 64,
        want_slots: int = 8,
    ) -> None:
        self.redis = redis
        self.timeout_s = redis.timeout_s
        self._clock = clock
        self._flush_interval_s = flush_interval_s
        self._slot_idle_s = slot_idle_s
        self._want = (want_requests, want_token_requests, want_slots)
        self._windows: dict[str, list[Any]] = {}
        """Window key -> [tenant, bucket second, units of credit]."""
        self._slots: dict[str, list[tuple[str, float, float]]] = {}
        """Lease set -> spare slots (member, lease expiry, unused since)."""
        self._slot_tenants: dict[str, str] = {}
        self._held: dict[str, list[tuple[str, str, float, bool]]] = {}
        """Request id -> its leases (lease set, member, expiry, may become a spare)."""
        self._snapshots: dict[tuple[str, str, tuple[LimitRule, ...]], list[Any]] = {}
        """(tenant, month, rules) -> [Redis's last decision, requests and tokens admitted since]."""
        self._rooms: dict[tuple[str, str], dict[tuple[BudgetRule, ...], list[float]]] = {}
        """(tenant, month) -> budgets -> [second Redis answered in, budget room left]."""
        self._pending: dict[str, _Pending] = {}
        self._asking: set[tuple[str, str, tuple[LimitRule, ...]]] = set()
        """Rule sets with a credit request on its way to Redis."""
        self._settled: OrderedDict[str, None] = OrderedDict()
        self._ticker: asyncio.Task[None] | None = None
        self._flush_failed = False
        self._closed = False

    # ---- admit -----------------------------------------------------------------------------

    async def admit(self, admission: Admission) -> Decision:
        key_names, checks = self.redis.admit_layout(admission.tenant, admission.month, admission.rules)
        decision = self._admit_locally(admission, key_names, checks)
        if decision is not None:
            return decision
        return await self._admit_in_redis(admission, key_names, checks)

    def _admit_locally(
        self, admission: Admission, key_names: list[str], checks: list[tuple[int, int, int, int]]
    ) -> Decision | None:
        now = admission.now_s
        cur = math.floor(now)
        if admission.budgets:
            room = self._rooms.get((admission.tenant, admission.month), {}).get(admission.budgets)
            if room is None or room[0] != cur or room[1] <= 0:
                return None
        snapshot = self._snapshots.get((admission.tenant, admission.month, admission.rules))
        if snapshot is None:
            return None
        reserve = admission.reserve_tokens
        windows, slots = self._windows, self._slots
        reuse_by = now + admission.lease_ttl_s - REUSE_MARGIN_S
        for kind, _, key_no, _ in checks:
            key = key_names[key_no - 1]
            if kind == 3:
                spare = slots.get(key)
                if not spare or spare[-1][1] < reuse_by:
                    return None
            else:
                need = 1 if kind == 1 else reserve
                if need:
                    credit = windows.get(key)
                    if credit is None or credit[1] != cur or credit[2] < need:
                        return None
        held = []
        for kind, _, key_no, _ in checks:
            key = key_names[key_no - 1]
            if kind == 3:
                member, expiry, _ = slots[key].pop()
                held.append((key, member, expiry, True))
            elif kind == 1:
                windows[key][2] -= 1
            elif reserve:
                windows[key][2] -= reserve
        if held:
            self._held[admission.request_id] = held
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

    async def _admit_in_redis(
        self, admission: Admission, key_names: list[str], checks: list[tuple[int, int, int, int]]
    ) -> Decision:
        tenant = admission.tenant
        # hand back what this replica holds on these keys first: its credit must not deny its own request
        for kind, _, key_no, _ in checks:
            key = key_names[key_no - 1]
            if kind == 3:
                spare = self._slots.pop(key, None)
                if spare:
                    self._pending_of(tenant).add_release(key, [member for member, _, _ in spare])
            else:
                credit = self._windows.pop(key, None)
                if credit is not None and credit[2] > 0:
                    self._pending_of(tenant).add_adjust(key, credit[1], -credit[2])
        pending = self._pending.get(tenant)
        if pending is not None and not pending.empty():
            await self._flush_tenant(tenant)
        # one credit request at a time per rule set: sixteen admits missing credit at once must not
        # each take a sixteenth of the room
        asking = (tenant, admission.month, admission.rules)
        want = None
        if asking not in self._asking:
            want = (self._want[0], self._want[1] * admission.reserve_tokens, self._want[2])
            self._asking.add(asking)
        try:
            decision, room, grants = await self.redis.admit_with_credit(admission, want)
        except StoreUnavailable:
            self._hand_back(self._clock(), everything=True)  # no credit spent while Redis is away
            raise
        finally:
            if want is not None:
                self._asking.discard(asking)
        if not decision.allowed:
            return decision
        now, request_id = admission.now_s, admission.request_id
        cur = math.floor(now)
        held = []
        for (kind, _, key_no, limit), granted in zip(checks, grants, strict=True):
            key = key_names[key_no - 1]
            if kind == 3:
                expiry = now + admission.lease_ttl_s
                held.append((key, request_id, expiry, limit >= MIN_POOLED_LIMIT))
                if granted:
                    spare = self._slots.setdefault(key, [])
                    spare.extend((f"{request_id}#{n}", expiry, now) for n in range(1, granted + 1))
                    self._slot_tenants[key] = tenant
            elif granted:
                credit = self._windows.get(key)
                if credit is not None and credit[1] == cur:
                    credit[2] += granted
                else:
                    if credit is not None and credit[2] > 0:
                        self._pending_of(tenant).add_adjust(key, credit[1], -credit[2])
                    self._windows[key] = [tenant, cur, granted]
        if held:
            self._held[request_id] = held
        self._snapshots[(tenant, admission.month, admission.rules)] = [decision, 0, 0]
        if len(self._snapshots) > 4096:
            self._snapshots.clear()
        if room is not None:
            self._rooms.setdefault((tenant, admission.month), {})[admission.budgets] = [cur, room]
        self._start_ticker()
        return decision

    # ---- settle ----------------------------------------------------------------------------

    async def settle(self, settlement: Settlement) -> None:
        request_id = settlement.request_id
        if request_id in self._settled:
            return
        self._settled[request_id] = None
        if len(self._settled) > _MAX_SETTLED_IDS:
            self._settled.popitem(last=False)
        tenant = settlement.tenant
        pending = self._pending_of(tenant)
        keys = self.redis.keys
        ledger = keys.usage(tenant, settlement.month)
        ints, floats = pending.ints, pending.floats
        scopes = ["tenant"]
        if settlement.key_id:
            scopes.append(f"key:{settlement.key_id}")
        if settlement.pool:
            scopes.append(f"pool:{settlement.pool}")
        for scope in scopes:
            for field, amount in (
                ("requests", 1),
                ("input_tokens", settlement.input_tokens),
                ("output_tokens", settlement.output_tokens),
            ):
                name = (ledger, f"{scope}|{field}")
                ints[name] = ints.get(name, 0) + amount
            name = (ledger, f"{scope}|cost_usd")
            floats[name] = floats.get(name, 0.0) + float(settlement.cost_usd)
        rooms = self._rooms.get((tenant, settlement.month))
        if rooms and settlement.cost_usd:
            for room in rooms.values():
                room[1] -= settlement.cost_usd

        now = settlement.now_s if settlement.now_s is not None else self._clock()
        delta = settlement.input_tokens + settlement.output_tokens - settlement.reserved_tokens
        bucket = math.floor(settlement.reserved_at_s)
        if delta and bucket >= math.floor(now) - WINDOW_S:
            for rule in settlement.rules:
                if rule.tokens_per_minute is None:
                    continue
                key = keys.tokens(tenant, rule.scope)
                credit = self._windows.get(key)
                if delta < 0 and credit is not None and credit[1] == bucket:
                    credit[2] -= delta  # reserved in this very second: straight back into credit
                else:
                    pending.add_adjust(key, bucket, delta)

        for key, member, expiry, poolable in self._held.pop(request_id, ()):
            if poolable and expiry > now:
                self._slots.setdefault(key, []).append((member, expiry, now))
                self._slot_tenants[key] = tenant
            else:
                pending.add_release(key, [member])
        self._start_ticker()

    # ---- flushing --------------------------------------------------------------------------

    def _pending_of(self, tenant: str) -> _Pending:
        pending = self._pending.get(tenant)
        if pending is None:
            pending = self._pending[tenant] = _Pending()
        return pending

    async def _flush_tenant(self, tenant: str) -> None:
        pending = self._pending.pop(tenant, None)
        if pending is None or pending.empty():
            return
        keys, spec = pending.spec(self.redis.ledger_ttl_s)
        try:
            await self.redis.flush(keys, spec)
        except BaseException as exc:
            # keep it for the next flush (what piled up meanwhile is newer; sums do not care)
            self._pending_of(tenant).merge(pending)
            if isinstance(exc, StoreUnavailable):
                self._hand_back(self._clock(), everything=True)  # no credit spent while Redis is away
            raise

    def _hand_back(self, now: float, *, everything: bool = False) -> None:
        """Window credit of seconds gone by and spare slots unused for a while go to pending."""
        cur = math.floor(now)
        for key, credit in list(self._windows.items()):
            if everything or credit[1] != cur:
                del self._windows[key]
                if credit[2] > 0:
                    self._pending_of(credit[0]).add_adjust(key, credit[1], -credit[2])
        for key, spare in list(self._slots.items()):
            keep: list[tuple[str, float, float]] = []
            gone: list[tuple[str, float, float]] = []
            for slot in spare:
                fresh = not everything and now - slot[2] < self._slot_idle_s and slot[1] > now
                (keep if fresh else gone).append(slot)
            if gone:
                self._pending_of(self._slot_tenants[key]).add_release(key, [member for member, _, _ in gone])
                if keep:
                    self._slots[key] = keep
                else:
                    del self._slots[key]

    async def flush(self) -> None:
        """Write every tenant's pending settles now (raises StoreUnavailable when Redis does not answer)."""
        self._hand_back(self._clock())
        failure: StoreUnavailable | None = None
        for tenant in list(self._pending):
            try:
                await self._flush_tenant(tenant)
            except StoreUnavailable as exc:
                failure = exc
        if failure is not None:
            raise failure

    def _start_ticker(self) -> None:
        if self._ticker is None and not self._closed:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval_s)
            try:
                await self.flush()
            except StoreUnavailable as exc:
                if not self._flush_failed:
                    logger.warning("could not write settled usage: %s; keeping it until Redis answers", exc)
                self._flush_failed = True
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
        self._hand_back(self._clock(), everything=True)
        try:
            await self.flush()
        except StoreUnavailable as exc:
            logger.warning("closing with settled usage not written: %s", exc)
        await self.redis.close()
