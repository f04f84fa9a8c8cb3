"""The Store protocol and the values that cross it.

A store answers three questions for the rate-limit stage, each in one round trip:

- ``admit(Admission) -> Decision``: may this request start? Checks every rule (requests, tokens and
  concurrent requests per minute, monthly budgets) and, when all pass, takes everything at once.
- ``settle(Settlement)``: the request ended; replace the token reservation with the real usage, release
  the concurrency leases, add the spend and usage to the monthly ledger. Idempotent per request id, so
  a settle that failed (or timed out) can be sent again: the failover store keeps those Redis could
  not take and sends them when it answers.
- ``usage(month)``: the ledger, per tenant, key and pool.

Windows are sliding, with one-second buckets: a request admitted at time ``t`` counts against every
request and token limit until ``floor(t) + 61`` (between 60 and 61 seconds), so no 60-second span ever
holds more than the limit. Time always comes from the caller (``now_s``, Unix seconds), so tests drive
the clock and replicas sharing one Redis agree on the buckets.

Errors: ``StoreError`` is the root; ``StoreUnavailable`` means "the store could not answer in time"
(connection refused, timeout, a Redis error); the failover wrapper and the gateway map it to
fail-open or to a 503.
"""

from __future__ import annotations

import calendar
import functools
import math
from typing import Protocol, runtime_checkable

import msgspec

WINDOW_S = 60
"""Length of the request and token windows in seconds."""


class StoreError(Exception):
    """Root of the store errors."""


class StoreUnavailable(StoreError):
    """The store did not answer (down, timed out, or refused the command).

    ``retry_after_s`` is a hint for a 503's Retry-After header.
    """

    def __init__(self, message: str = "rate-limit store unavailable", *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LimitRule(msgspec.Struct, frozen=True):
    """Limits of one scope under a tenant; ``None`` means "not limited"."""

    scope: str
    """``"key:<key_id>"``, ``"tenant"`` or ``"pool:<pool>"``."""
    requests_per_minute: int | None = None
    """Requests admitted in any 60-second window."""
    tokens_per_minute: int | None = None
    """Tokens (reserved, then settled to real usage) in any 60-second window."""
    max_concurrent: int | None = None
    """Requests in flight at once (each holds a lease that expires on its own)."""


class BudgetRule(msgspec.Struct, frozen=True):
    """A monthly spend cap for one scope under a tenant."""

    scope: str
    """``"key:<key_id>"`` or ``"tenant"``."""
    monthly_usd: float
    """Admission is denied once the spend of the calendar month (UTC) reaches this."""


class Admission(msgspec.Struct, frozen=True):
    """Everything one request needs checked, in one round trip."""

    tenant: str
    request_id: str
    """Unique per request: names the concurrency lease and the settle marker. Empty for a bare hit
    (``gateway.client_limits``: requests rules only, never settled)."""
    rules: tuple[LimitRule, ...]
    budgets: tuple[BudgetRule, ...]
    reserve_tokens: int
    """Prompt tokens + max_tokens: what every tokens-per-minute rule reserves up front."""
    now_s: float
    """Unix seconds from the injected clock (replicas sharing a store must share the clock's epoch)."""
    lease_ttl_s: float
    """The longest this request may hold its concurrency leases (its own lifetime bound). The memory
    store keeps them this long at most; Redis ones expire ``RedisStore.lease_expiry_s`` (30 s) after their
    replica last renewed them, and it renews them up to this while the request runs."""
    month: str
    """UTC calendar month, ``"2026-11"``."""


class Decision(msgspec.Struct, frozen=True):
    """The answer to an Admission, with what OpenAI's rate-limit headers need.

    The header fields come from the tightest rule of each kind (the one with the least remaining);
    ``None`` when no rule limits that kind. Remaining counts include this request when it was admitted.
    Reset is the time until the window holds nothing (the limit is back to its initial state).
    """

    allowed: bool
    reason: str | None = None
    """``None`` | ``"requests"`` | ``"tokens"`` | ``"concurrency"`` | ``"budget"``."""
    scope: str | None = None
    """The scope of the rule that denied."""
    retry_after_s: float = 0.0
    """When a retry can pass every rule that denied (0 when allowed)."""
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    exceeds_limit: bool = False
    """True when ``reserve_tokens`` is larger than a whole tokens-per-minute limit: no wait can help."""


class Settlement(msgspec.Struct, frozen=True):
    """The end of an admitted request: real usage replaces the reservation."""

    tenant: str
    request_id: str
    rules: tuple[LimitRule, ...]
    budgets: tuple[BudgetRule, ...]
    reserved_tokens: int
    """What admit reserved (``Admission.reserve_tokens``)."""
    reserved_at_s: float
    """When admit reserved (``Admission.now_s``): names the bucket that holds the reservation."""
    input_tokens: int
    """Real usage; (0, 0) when the upstream never answered."""
    output_tokens: int
    cost_usd: float
    pool: str
    key_id: str
    month: str
    now_s: float | None = None
    """When settling; a reservation whose bucket has left the window by then is not touched."""


class UsageTotals(msgspec.Struct, frozen=True):
    """Settled requests, tokens and spend of one scope in one month."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )


class TenantUsage(msgspec.Struct, frozen=True):
    """One tenant's month: its total, and per key and per pool."""

    total: UsageTotals
    keys: dict[str, UsageTotals]
    pools: dict[str, UsageTotals]


class UsageReport(msgspec.Struct, frozen=True):
    """The ledger of one month, per tenant (and per key and pool inside each tenant)."""

    month: str
    tenants: dict[str, TenantUsage]

    def merged(self, other: UsageReport) -> UsageReport:
        """Both reports summed (the failover store adds what its fallback recorded during an outage)."""
        tenants = dict(self.tenants)
        for name, theirs in other.tenants.items():
            ours = tenants.get(name)
            if ours is None:
                tenants[name] = theirs
                continue
            tenants[name] = TenantUsage(
                total=ours.total + theirs.total,
                keys=_sum_maps(ours.keys, theirs.keys),
                pools=_sum_maps(ours.pools, theirs.pools),
            )
        return UsageReport(month=self.month, tenants=tenants)


def _sum_maps(a: dict[str, UsageTotals], b: dict[str, UsageTotals]) -> dict[str, UsageTotals]:
    out = dict(a)
    for name, totals in b.items():
        out[name] = out[name] + totals if name in out else totals
    return out


@runtime_checkable
class Store(Protocol):
    """Where limits, leases and the usage ledger live (MemoryStore, RedisStore, FailoverStore)."""

    async def admit(self, admission: Admission) -> Decision:
        """Check every rule; either take everything (allowed) or nothing (denied)."""
        ...

    async def settle(self, settlement: Settlement) -> None:
        """Real usage replaces the reservation; leases released; ledger updated. A repeat is a no-op.
        Raises StoreUnavailable when the store did not take it (RedisStore; FailoverStore keeps it)."""
        ...

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        """The ledger of ``month``, for one tenant or all."""
        ...

    async def ping(self) -> bool:
        """True when the store answers now (never raises)."""
        ...

    async def flush(self) -> None:
        """Write now whatever this replica holds back (settles batched for later); a no-op for stores
        that write at once. Raises StoreUnavailable when the store does not answer."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


# ---- helpers shared by the stores -------------------------------------------------------------


def seconds_to_next_month(month: str, now_s: float) -> float:
    """Seconds from ``now_s`` until the first instant of the UTC month after ``month`` (at least 1)."""
    return max(1.0, _next_month_start_s(month) - now_s)


@functools.lru_cache(maxsize=64)
def _next_month_start_s(month: str) -> int:
    year, mon = (int(part) for part in month.split("-", 1))
    year, mon = (year + 1, 1) if mon == 12 else (year, mon + 1)
    return calendar.timegm((year, mon, 1, 0, 0, 0, 0, 0, 0))


def usage_field(scope: str, metric: str) -> str:
    """Ledger hash field: ``"<scope>|<metric>"``, scope ``tenant`` / ``key:<id>`` / ``pool:<pool>``."""
    return f"{scope}|{metric}"


def tenant_usage_from_fields(fields: dict[str, str]) -> TenantUsage:
    """Build a TenantUsage from a ledger hash (``usage_field`` names -> numbers as strings)."""
    acc: dict[str, dict[str, float]] = {}
    for name, value in fields.items():
        scope, _, metric = name.rpartition("|")
        acc.setdefault(scope, {})[metric] = float(value)
    total = UsageTotals()
    keys: dict[str, UsageTotals] = {}
    pools: dict[str, UsageTotals] = {}
    for scope, metrics in acc.items():
        totals = UsageTotals(
            requests=int(metrics.get("requests", 0)),
            input_tokens=int(metrics.get("input_tokens", 0)),
            output_tokens=int(metrics.get("output_tokens", 0)),
            cost_usd=metrics.get("cost_usd", 0.0),
        )
        if scope == "tenant":
            total = totals
        elif scope.startswith("key:"):
            keys[scope[4:]] = totals
        elif scope.startswith("pool:"):
            pools[scope[5:]] = totals
    return TenantUsage(total=total, keys=keys, pools=pools)


def format_reset(seconds: float) -> str:
    """OpenAI's reset format: ``"20ms"``, ``"1s"``, ``"6m0s"``, ``"1h2m3s"``."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    return _format_whole_seconds(math.ceil(seconds))


@functools.lru_cache(maxsize=256)
def _format_whole_seconds(total: int) -> str:
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def openai_ratelimit_headers(decision: Decision) -> dict[str, str]:
    """OpenAI's six ``x-ratelimit-*`` headers (those with a limit) plus Retry-After when denied."""
    headers: dict[str, str] = {}
    if decision.limit_requests is not None:
        headers["x-ratelimit-limit-requests"] = str(decision.limit_requests)
        headers["x-ratelimit-remaining-requests"] = str(decision.remaining_requests or 0)
        headers["x-ratelimit-reset-requests"] = format_reset(decision.reset_requests_s or 0.0)
    if decision.limit_tokens is not None:
        headers["x-ratelimit-limit-tokens"] = str(decision.limit_tokens)
        headers["x-ratelimit-remaining-tokens"] = str(decision.remaining_tokens or 0)
        headers["x-ratelimit-reset-tokens"] = format_reset(decision.reset_tokens_s or 0.0)
    if not decision.allowed:
        headers["retry-after"] = str(max(1, math.ceil(decision.retry_after_s)))
    return headers
