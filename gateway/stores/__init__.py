"""Rate-limit, concurrency and budget stores: one round trip per request, in Redis or in memory.

Public API::

    from gateway.stores import (Admission, Decision, LimitRule, BudgetRule, Settlement, UsageReport,
                                Store, MemoryStore, RedisStore, CreditStore, FailoverStore,
                                StoreUnavailable)
"""

from gateway.stores.base import (
    WINDOW_S,
    Admission,
    BudgetRule,
    Decision,
    LimitRule,
    Settlement,
    Store,
    StoreError,
    StoreUnavailable,
    TenantUsage,
    UsageReport,
    UsageTotals,
    format_reset,
    openai_ratelimit_headers,
)
from gateway.stores.credit import CreditStore
from gateway.stores.failover import FailMode, FailoverStore
from gateway.stores.memory import MemoryStore
from gateway.stores.redis import RedisStore

__all__ = [
    "WINDOW_S",
    "Admission",
    "BudgetRule",
    "CreditStore",
    "Decision",
    "FailMode",
    "FailoverStore",
    "LimitRule",
    "MemoryStore",
    "RedisStore",
    "Settlement",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TenantUsage",
    "UsageReport",
    "UsageTotals",
    "format_reset",
    "openai_ratelimit_headers",
]
