"""MemoryStore: the in-process store (the single-replica default, and the fail-open fallback).

Same semantics as RedisStore's Lua scripts, line for line (the contract tests run over both). It is
atomic because ``admit`` and ``settle`` never await: on one event loop nothing interleaves with them.
Idle windows, leases, settle markers and old months are swept as the clock moves, so memory stays
bounded by the traffic of the last few minutes plus 13 months of ledger.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict

from gateway.stores.base import (
    WINDOW_S,
    Admission,
    Decision,
    Settlement,
    TenantUsage,
    UsageReport,
    seconds_to_next_month,
    tenant_usage_from_fields,
    usage_field,
)
from gateway.stores.key_names import KeySpace

_REASON_ORDER = ("budget", "requests", "tokens", "concurrency")


class _Window:
    """Per-second buckets of one sliding window: second -> amount."""

    __slots__ = ("buckets",)

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}

    def scan(self, now_s: float) -> tuple[int, list[tuple[int, int]]]:
        """Drop buckets that left the window; return (amount in window, live buckets oldest first)."""
        oldest_live = math.floor(now_s) - WINDOW_S
        stale = [b for b in self.buckets if b < oldest_live]
        for b in stale:
            del self.buckets[b]
        live = sorted(self.buckets.items())
        return sum(c for _, c in live), live


def _wait_s(live: list[tuple[int, int]], used: int, need: int, limit: int, now_s: float) -> float:
    """Seconds until ``used + need <= limit`` as the oldest buckets leave the window."""
    excess = used + need - limit
    freed = 0
    for bucket, amount in live:
        freed += amount
        if freed >= excess:
            return bucket + WINDOW_S + 1 - now_s
    return float(WINDOW_S + 1)


def _reset_s(live: list[tuple[int, int]], now_s: float) -> float:
    """Seconds until the window is empty."""
    return live[-1][0] + WINDOW_S + 1 - now_s if live else 0.0


_MAX_SETTLED_IDS = 8192
"""Settled request ids remembered at most (a repeat settle comes right after the first)."""


@functools.lru_cache(maxsize=1024)
def _ledger_fields(key_id: str, pool: str) -> tuple[tuple[str, ...], ...]:
    """The ledger fields a settle adds to: requests, input and output tokens, cost, per scope."""
    scopes = ["tenant"]
    if key_id:
        scopes.append(f"key:{key_id}")
    if pool:
        scopes.append(f"pool:{pool}")
    metrics = ("requests", "input_tokens", "output_tokens", "cost_usd")
    return tuple(tuple(usage_field(scope, metric) for metric in metrics) for scope in scopes)


class MemoryStore:
    """The Store protocol in one process's memory."""

    def __init__(self, *, prefix: str = "sy:", settled_ttl_s: float = 3600.0, months_kept: int = 13) -> None:
        self._keys = KeySpace(prefix)
        self._settled_ttl_s = settled_ttl_s
        self._months_kept = months_kept
        self._windows: dict[str, _Window] = {}
        self._leases: dict[str, dict[str, float]] = {}
        self._ledger: dict[str, dict[str, dict[str, float]]] = {}  # month -> tenant -> field -> value
        self._settled: OrderedDict[tuple[str, str], float] = OrderedDict()  # (tenant, id) -> expiry
        self._swept_at_s = -math.inf

    async def admit(self, admission: Admission) -> Decision:
        now_s = admission.now_s
        self._sweep(now_s)
        tenant = admission.tenant
        failures: list[tuple[str, str, float]] = []  # (reason, scope, retry_after_s)
        exceeds = False

        ledger = self._ledger.get(admission.month, {}).get(tenant, {})
        for budget in admission.budgets:
            if ledger.get(usage_field(budget.scope, "cost_usd"), 0.0) >= budget.monthly_usd:
                failures.append(("budget", budget.scope, seconds_to_next_month(admission.month, now_s)))

        req_stats: list[tuple[int, int, list[tuple[int, int]]]] = []  # (limit, used, live)
        tok_stats: list[tuple[int, int, list[tuple[int, int]]]] = []
        for rule in admission.rules:
            if rule.requests_per_minute is not None:
                limit = rule.requests_per_minute
                used, live = self._window(self._keys.requests(tenant, rule.scope)).scan(now_s)
                req_stats.append((limit, used, live))
                if used + 1 > limit:
                    failures.append(("requests", rule.scope, _wait_s(live, used, 1, limit, now_s)))
            if rule.tokens_per_minute is not None:
                limit = rule.tokens_per_minute
                used, live = self._window(self._keys.tokens(tenant, rule.scope)).scan(now_s)
                tok_stats.append((limit, used, live))
                if admission.reserve_tokens > limit:
                    exceeds = True
                    failures.append(("tokens", rule.scope, float(WINDOW_S)))
                elif used + admission.reserve_tokens > limit:
                    wait = _wait_s(live, used, admission.reserve_tokens, limit, now_s)
                    failures.append(("tokens", rule.scope, wait))
            if rule.max_concurrent is not None:
                leases = self._leases.setdefault(self._keys.leases(tenant, rule.scope), {})
                for request_id in [r for r, expiry in leases.items() if expiry <= now_s]:
                    del leases[request_id]
                if len(leases) >= rule.max_concurrent:
                    earliest = min(leases.values(), default=now_s + 1.0)
                    failures.append(("concurrency", rule.scope, min(1.0, max(0.0, earliest - now_s))))

        allowed = not failures
        if allowed:
            self._take(admission)
        return self._decision(admission, failures, exceeds, req_stats, tok_stats)

    def _take(self, admission: Admission) -> None:
        now_s, tenant = admission.now_s, admission.tenant
        bucket = math.floor(now_s)
        for rule in admission.rules:
            if rule.requests_per_minute is not None:
                window = self._window(self._keys.requests(tenant, rule.scope))
                window.buckets[bucket] = window.buckets.get(bucket, 0) + 1
            if rule.tokens_per_minute is not None and admission.reserve_tokens > 0:
                window = self._window(self._keys.tokens(tenant, rule.scope))
                window.buckets[bucket] = window.buckets.get(bucket, 0) + admission.reserve_tokens
            if rule.max_concurrent is not None:
                leases = self._leases.setdefault(self._keys.leases(tenant, rule.scope), {})
                leases[admission.request_id] = now_s + admission.lease_ttl_s

    @staticmethod
    def _decision(
        admission: Admission,
        failures: list[tuple[str, str, float]],
        exceeds: bool,
        req_stats: list[tuple[int, int, list[tuple[int, int]]]],
        tok_stats: list[tuple[int, int, list[tuple[int, int]]]],
    ) -> Decision:
        now_s = admission.now_s
        allowed = not failures
        fresh_reset_s = math.floor(now_s) + WINDOW_S + 1 - now_s  # a bucket written just now

        def tightest(
            stats: list[tuple[int, int, list[tuple[int, int]]]], cost: int
        ) -> tuple[int | None, int | None, float | None]:
            best: tuple[int, int, float] | None = None
            for limit, used, live in stats:
                took = allowed and cost > 0
                remaining = max(0, limit - used - (cost if took else 0))
                reset = fresh_reset_s if took else _reset_s(live, now_s)
                if best is None or remaining < best[1]:
                    best = (limit, remaining, reset)
            return best if best is not None else (None, None, None)

        lim_r, rem_r, reset_r = tightest(req_stats, 1)
        lim_t, rem_t, reset_t = tightest(tok_stats, admission.reserve_tokens)
        if allowed:
            return Decision(
                allowed=True,
                limit_requests=lim_r,
                remaining_requests=rem_r,
                reset_requests_s=reset_r,
                limit_tokens=lim_t,
                remaining_tokens=rem_t,
                reset_tokens_s=reset_t,
            )
        reason, scope, _ = min(failures, key=lambda f: _REASON_ORDER.index(f[0]))
        return Decision(
            allowed=False,
            reason=reason,
            scope=scope,
            retry_after_s=max(f[2] for f in failures),
            limit_requests=lim_r,
            remaining_requests=rem_r,
            reset_requests_s=reset_r,
            limit_tokens=lim_t,
            remaining_tokens=rem_t,
            reset_tokens_s=reset_t,
            exceeds_limit=exceeds,
        )

    async def settle(self, settlement: Settlement) -> None:
        tenant = settlement.tenant
        marker = (tenant, settlement.request_id)
        if marker in self._settled:
            return  # settled already
        now_s = settlement.now_s if settlement.now_s is not None else settlement.reserved_at_s
        self._settled[marker] = now_s + self._settled_ttl_s
        self._settled.move_to_end(marker)
        if len(self._settled) > _MAX_SETTLED_IDS:  # at thousands of requests a second, an hour is millions
            self._settled.popitem(last=False)

        bucket = math.floor(settlement.reserved_at_s)
        in_window = settlement.now_s is None or bucket >= math.floor(settlement.now_s) - WINDOW_S
        delta = settlement.input_tokens + settlement.output_tokens - settlement.reserved_tokens
        for rule in settlement.rules:
            if rule.tokens_per_minute is not None and in_window:
                window = self._windows.get(self._keys.tokens(tenant, rule.scope))
                if window is not None and bucket in window.buckets:
                    window.buckets[bucket] = max(0, window.buckets[bucket] + delta)
            if rule.max_concurrent is not None:
                self._leases.get(self._keys.leases(tenant, rule.scope), {}).pop(settlement.request_id, None)

        by_month = self._ledger.get(settlement.month)
        if by_month is None:
            by_month = self._ledger[settlement.month] = {}
            self._prune_months()
        ledger = by_month.get(tenant)
        if ledger is None:
            ledger = by_month[tenant] = {}
        amounts = (1, settlement.input_tokens, settlement.output_tokens, settlement.cost_usd)
        for fields in _ledger_fields(settlement.key_id, settlement.pool):
            for field, amount in zip(fields, amounts, strict=True):
                ledger[field] = ledger.get(field, 0) + amount

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        by_tenant = self._ledger.get(month, {})
        names = [tenant] if tenant is not None else sorted(by_tenant)
        tenants: dict[str, TenantUsage] = {}
        for name in names:
            fields = by_tenant.get(name)
            if fields:
                tenants[name] = tenant_usage_from_fields({k: str(v) for k, v in fields.items()})
        return UsageReport(month=month, tenants=tenants)

    async def ping(self) -> bool:
        return True

    async def flush(self) -> None:
        return None  # every settle is applied at once

    async def close(self) -> None:
        return None

    # ---- bookkeeping ------------------------------------------------------------------------

    def _window(self, key: str) -> _Window:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        return window

    def _sweep(self, now_s: float) -> None:
        """Once a window length, drop idle windows, expired leases and expired settle markers."""
        if now_s - self._swept_at_s < WINDOW_S:
            return
        self._swept_at_s = now_s
        for key in [k for k, w in self._windows.items() if not w.scan(now_s)[1]]:
            del self._windows[key]  # nothing left in its window
        for key, leases in list(self._leases.items()):
            for request_id in [r for r, expiry in leases.items() if expiry <= now_s]:
                del leases[request_id]
            if not leases:
                del self._leases[key]
        while self._settled:
            marker, expiry = next(iter(self._settled.items()))
            if expiry > now_s:
                break
            del self._settled[marker]

    def _prune_months(self) -> None:
        if len(self._ledger) > self._months_kept:
            for month in sorted(self._ledger)[: len(self._ledger) - self._months_kept]:
                del self._ledger[month]
