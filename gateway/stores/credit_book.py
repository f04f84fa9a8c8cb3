"""CreditBook: the credit one replica holds, taken from Redis by ``admit.lua``, until it goes back.

Two kinds, both already counted in Redis:

- **Window credit**: requests or tokens charged to one window key's bucket of one second. It is good
  only in that second; once the second is over, what is left is handed back to its bucket.
- **Spare lease slots**: members (``<request id>#<n>``, or the lease of a request that ended) held in
  a concurrency set. A slot unused for ``slot_idle_s`` goes back.

What goes back is added to the tenant's pending writes (``writeback.py``), sent with its next flush.
CreditStore decides when to spend and when to hand back; this book does the sums.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.stores.credit_plan import CreditPlan
from gateway.stores.leases import Held
from gateway.stores.writeback import WriteBack

MIN_POOLED_LIMIT = 64
"""Lease slots are kept as spares only under concurrency limits this large (admit.lua grants none below)."""


class CreditBook:
    """Window credit and spare lease slots of one replica (see the module docstring).

    Args:
        writes: where credit handed back goes (the tenant's pending writes).
        slot_idle_s: how long a spare lease slot is kept unused before it goes back.
    """

    def __init__(self, writes: WriteBack, *, slot_idle_s: float) -> None:
        self._writes = writes
        self._slot_idle_s = slot_idle_s
        self.windows: dict[str, list[Any]] = {}
        """Window key -> [tenant, bucket second, units of credit]."""
        self.slots: dict[str, list[tuple[str, float, float]]] = {}
        """Lease set -> spare slots (member, lease expiry, unused since)."""
        self._slot_tenants: dict[str, str] = {}

    def can_spend(self, local: list[tuple[int, str]], second: int, reserve: int, reuse_by: float) -> bool:
        """Whether credit answers every check (``CreditPlan.local``) of a request admitted in
        ``second`` reserving ``reserve`` tokens: a spare slot must hold its lease until ``reuse_by``."""
        windows, slots = self.windows, self.slots
        for kind, key in local:
            if kind == 3:
                spare = slots.get(key)
                if not spare or spare[-1][1] < reuse_by:
                    return False
            else:
                need = 1 if kind == 1 else reserve
                if need:
                    credit = windows.get(key)
                    if credit is None or credit[1] != second or credit[2] < need:
                        return False
        return True

    def spend(self, local: list[tuple[int, str]], reserve: int) -> tuple[list[tuple[str, str, bool]], float]:
        """Spend credit on every check (after ``can_spend``): the spare slots taken, as leases the
        request holds, and the soonest of their expiries (``inf`` when none)."""
        held = []
        expiry = math.inf
        for kind, key in local:
            if kind == 3:
                member, slot_expiry, _ = self.slots[key].pop()
                held.append((key, member, True))
                expiry = min(expiry, slot_expiry)
            elif kind == 1:
                self.windows[key][2] -= 1
            elif reserve:
                self.windows[key][2] -= reserve
        return held, expiry

    def hand_back_keys(self, tenant: str, local: list[tuple[int, str]]) -> None:
        """Hand back everything held on these keys, before asking Redis about them."""
        for kind, key in local:
            if kind == 3:
                spare = self.slots.pop(key, None)
                if spare:
                    self._writes.of(tenant).add_release(key, [member for member, _, _ in spare])
            else:
                credit = self.windows.pop(key, None)
                if credit is not None and credit[2] > 0:
                    self._writes.of(tenant).add_adjust(key, credit[1], -credit[2])

    def add_grants(
        self,
        tenant: str,
        plan: CreditPlan,
        grants: list[int],
        *,
        request_id: str,
        now_s: float,
        expiry_s: float,
    ) -> list[tuple[str, str, bool]]:
        """Take the credit Redis granted per check of an allowed admit (spare slots expire at
        ``expiry_s``, as admit.lua wrote them); the request's own leases."""
        second = math.floor(now_s)
        held = []
        for (kind, _, key_no, limit), granted in zip(plan.checks, grants, strict=True):
            key = plan.key_names[key_no - 1]
            if kind == 3:
                held.append((key, request_id, limit >= MIN_POOLED_LIMIT))
                if granted:
                    spare = self.slots.setdefault(key, [])
                    spare.extend((f"{request_id}#{n}", expiry_s, now_s) for n in range(1, granted + 1))
                    self._slot_tenants[key] = tenant
            elif granted:
                credit = self.windows.get(key)
                if credit is not None and credit[1] == second:
                    credit[2] += granted
                else:
                    if credit is not None and credit[2] > 0:
                        self._writes.of(tenant).add_adjust(key, credit[1], -credit[2])
                    self.windows[key] = [tenant, second, granted]
        return held

    def adjust_tokens(self, tenant: str, token_keys: list[str], bucket: int, delta: int) -> None:
        """A settle's tokens used less reserved, in the bucket they were reserved in: what was reserved
        in the very second credit is held for goes straight back into credit, the rest to Redis."""
        for key in token_keys:
            credit = self.windows.get(key)
            if delta < 0 and credit is not None and credit[1] == bucket:
                credit[2] -= delta
            else:
                self._writes.of(tenant).add_adjust(key, bucket, delta)

    def return_leases(self, tenant: str, held: Held, now_s: float) -> None:
        """A request ended: each of its leases becomes a spare slot if it may and has not expired,
        else it is released."""
        for key, member, poolable in held.leases:
            if poolable and held.expiry_s > now_s:
                self.slots.setdefault(key, []).append((member, held.expiry_s, now_s))
                self._slot_tenants[key] = tenant
            else:
                self._writes.of(tenant).add_release(key, [member])

    def hand_back(self, now_s: float, *, everything: bool = False) -> None:
        """Window credit of seconds gone by and spare slots unused for a while go to pending (all of
        it with ``everything``)."""
        second = math.floor(now_s)
        for key, credit in list(self.windows.items()):
            if everything or credit[1] != second:
                del self.windows[key]
                if credit[2] > 0:
                    self._writes.of(credit[0]).add_adjust(key, credit[1], -credit[2])
        for key, spare in list(self.slots.items()):
            keep: list[tuple[str, float, float]] = []
            gone: list[tuple[str, float, float]] = []
            for slot in spare:
                fresh = not everything and now_s - slot[2] < self._slot_idle_s and slot[1] > now_s
                (keep if fresh else gone).append(slot)
            if gone:
                self._writes.of(self._slot_tenants[key]).add_release(key, [member for member, _, _ in gone])
                if keep:
                    self.slots[key] = keep
                else:
                    del self.slots[key]
                    self._slot_tenants.pop(key, None)
