"""BudgetShares: how much of a tenant's budget room one replica may spend before it asks Redis again.

Redis reports the room left under a request's tightest monthly budget with each admit it answers
(``admit.lua``). Spend is only known when a request settles, and another replica's spend only at this
replica's next answer, so the room one answer reports is shared by every replica that had the same
answer. Each takes a sixteenth of it, as credit takes of a limit's room: for the rest of that second a
replica admits locally only while the cost it settled since, plus the largest cost of one request it
has settled for the tenant, stays within that share. Up to sixteen replicas together then never spend
past the room on answers they each had alone. Near the budget (the share is below one request's
cost) every request asks Redis, and a settle there is written at once (``CreditStore.settle``), so
the next admit on any replica sees it.
"""

from __future__ import annotations

from gateway.stores.base import BudgetRule

__all__ = ["BUDGET_SHARE", "BudgetShares"]

BUDGET_SHARE = 1 / 16
"""Of the room Redis last reported, what one replica may spend on local admits."""
_MAX_TENANT_MONTHS = 4096


class BudgetShares:
    """Per tenant and month: each budget set's room at Redis's last answer and what was settled since."""

    def __init__(self) -> None:
        self._rooms: dict[tuple[str, str], dict[tuple[BudgetRule, ...], list[float]]] = {}
        """(tenant, month) -> budgets -> [second Redis answered in, the room it reported, settled since]."""
        self._largest_cost: dict[tuple[str, str], float] = {}
        """(tenant, month) -> the largest cost of one request settled here: what the next may cost."""

    def answered(
        self, tenant: str, month: str, budgets: tuple[BudgetRule, ...], second: int, room: float
    ) -> None:
        """Redis admitted a request under ``budgets`` in ``second`` and reported ``room`` left."""
        if len(self._rooms) >= _MAX_TENANT_MONTHS:
            self._rooms.clear()
        self._rooms.setdefault((tenant, month), {})[budgets] = [second, room, 0.0]

    def may_admit(self, tenant: str, month: str, budgets: tuple[BudgetRule, ...], second: int) -> bool:
        """Whether a request under ``budgets`` may be admitted here without asking Redis (no answer this
        second, or no cost settled yet: it asks)."""
        key = (tenant, month)
        room = self._rooms.get(key, {}).get(budgets)
        largest = self._largest_cost.get(key)
        if room is None or room[0] != second or largest is None:
            return False
        return room[2] + largest <= room[1] * BUDGET_SHARE

    def settled(self, tenant: str, month: str, cost: float) -> bool:
        """A request under budgets cost ``cost``; whether the tenant is near a budget (each request asks
        Redis, so the spend must be written at once)."""
        key = (tenant, month)
        largest = self._largest_cost[key] = max(cost, self._largest_cost.get(key, 0.0))
        if len(self._largest_cost) > _MAX_TENANT_MONTHS:
            self._largest_cost = {key: largest}
        rooms = self._rooms.get(key)
        if not rooms:
            return True
        for room in rooms.values():
            room[2] += cost
        return any(room[1] * BUDGET_SHARE < largest for room in rooms.values())
