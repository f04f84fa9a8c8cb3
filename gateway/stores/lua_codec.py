"""What RedisStore sends ``admit.lua`` and ``settle.lua``, and how it reads admit.lua's reply.

Each call passes its keys as KEYS (``key_layouts.py``) and everything else as one JSON argument,
read with ``cjson`` in the script: packing ~30 separate arguments cost more client CPU than the
script itself. (``flush.lua``'s argument is ``PendingWrites.spec``.)
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gateway.stores.base import WINDOW_S, Admission, Decision, Settlement, seconds_to_next_month

REASONS = {1: "requests", 2: "tokens", 3: "concurrency", 4: "budget"}
"""admit.lua's denial codes -> ``Decision.reason``."""

_json = msgspec.json.Encoder().encode


def admit_spec(
    admission: Admission,
    checks: list[tuple[int, int, int, int]],
    *,
    lease_expiry_s: float,
    want: tuple[int, int, int] | None,
) -> bytes:
    """admit.lua's argument: the admission, its checks (``KeyLayouts.admit``) and the credit wanted."""
    spec = {
        "now": admission.now_s,
        "lease_ttl": min(admission.lease_ttl_s, lease_expiry_s),  # renewed while it runs
        "reserve": admission.reserve_tokens,
        "id": admission.request_id,
        "window": WINDOW_S,
        "to_next_month": seconds_to_next_month(admission.month, admission.now_s),
        "checks": checks,
        "budgets": [(b.scope, float(b.monthly_usd)) for b in admission.budgets],
    }
    if want is not None:
        spec["want"] = want
    return _json(spec)


def read_admit_reply(reply: list[Any], admission: Admission) -> tuple[Decision, float | None, list[int]]:
    """admit.lua's reply: the decision, the budget room left (``None`` without budgets) and the
    credit granted per check."""
    allowed, reason, index, retry_ms, exceeds = (int(v) for v in reply[:5])
    lim_r, rem_r, reset_r, lim_t, rem_t, reset_t = (int(v) for v in reply[5:11])
    scope = None
    if not allowed:
        scopes = admission.budgets if reason == 4 else admission.rules
        scope = scopes[index - 1].scope
    decision = Decision(
        allowed=bool(allowed),
        reason=REASONS.get(reason),
        scope=scope,
        retry_after_s=retry_ms / 1000.0,
        limit_requests=_none_if_negative(lim_r),
        remaining_requests=_none_if_negative(rem_r),
        reset_requests_s=_seconds(reset_r),
        limit_tokens=_none_if_negative(lim_t),
        remaining_tokens=_none_if_negative(rem_t),
        reset_tokens_s=_seconds(reset_t),
        exceeds_limit=bool(exceeds),
    )
    room = float(reply[11]) if admission.budgets else None  # bytes or str: float() reads both
    return decision, room, [int(v) for v in reply[12:]]


def settle_spec(
    settlement: Settlement,
    *,
    settled_ttl_s: int,
    ledger_ttl_s: int,
    token_keys: list[int],
    lease_keys: list[int],
) -> bytes:
    """settle.lua's argument: the settlement, and the KEYS numbers of its token windows and lease
    sets (``KeyLayouts.settle``)."""
    scopes = ["tenant"]
    if settlement.key_id:
        scopes.append(f"key:{settlement.key_id}")
    if settlement.pool:
        scopes.append(f"pool:{settlement.pool}")
    spec = {
        "id": settlement.request_id,
        "marker_ttl": settled_ttl_s,
        "bucket": math.floor(settlement.reserved_at_s),
        "delta": settlement.input_tokens + settlement.output_tokens - settlement.reserved_tokens,
        "oldest_live": -1 if settlement.now_s is None else math.floor(settlement.now_s) - WINDOW_S,
        "input": settlement.input_tokens,
        "output": settlement.output_tokens,
        "cost": repr(float(settlement.cost_usd)),  # a string: HINCRBYFLOAT gets every digit
        "ledger_ttl": ledger_ttl_s,
        "scopes": scopes,
        "tokens": token_keys,
        "leases": lease_keys,
    }
    return _json(spec)


def _none_if_negative(value: int) -> int | None:
    return None if value < 0 else int(value)


def _seconds(ms: int) -> float | None:
    return None if ms < 0 else ms / 1000.0
