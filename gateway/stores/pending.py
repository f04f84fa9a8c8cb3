"""PendingWrites: what a CreditStore owes Redis for one tenant, summed until its next flush.

Settles add usage (per month, key and pool), token corrections (per window and bucket second) and
lease releases; unspent credit adds negative corrections. ``spec`` turns it into one
``lua/flush.lua`` call; ``merge`` takes a failed flush back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from gateway.stores.base import usage_field
from gateway.stores.keys import KeySpace

_json = msgspec.json.Encoder().encode

_MAX_PENDING_RELEASES = 10000
"""Lease releases kept per lease set while Redis is away (past that, leases expire by themselves)."""


class PendingWrites:
    """What one tenant's settles and refunds left to write."""

    __slots__ = ("adjust", "release", "usage")

    def __init__(self) -> None:
        self.usage: dict[tuple[str, str, str], list[Any]] = {}
        """(month, key id, pool) -> [requests, input tokens, output tokens, cost in USD]."""
        self.adjust: dict[tuple[str, int], int] = {}
        """(window key, bucket second) -> change."""
        self.release: dict[str, list[str]] = {}
        """Lease set -> members to remove."""

    def empty(self) -> bool:
        return not (self.usage or self.adjust or self.release)

    def add_usage(
        self, month: str, key_id: str, pool: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        totals = self.usage.get((month, key_id, pool))
        if totals is None:
            self.usage[(month, key_id, pool)] = [1, input_tokens, output_tokens, cost]
        else:
            totals[0] += 1
            totals[1] += input_tokens
            totals[2] += output_tokens
            totals[3] += cost

    def add_adjust(self, key: str, bucket: int, delta: int) -> None:
        self.adjust[(key, bucket)] = self.adjust.get((key, bucket), 0) + delta

    def add_release(self, key: str, members: Sequence[str]) -> None:
        held = self.release.setdefault(key, [])
        if len(held) < _MAX_PENDING_RELEASES:  # past that, the leases' own expiry frees them
            held.extend(members)

    def merge(self, other: PendingWrites) -> None:
        """Take back a flush that failed (``other`` is older than what piled up since)."""
        for (month, key_id, pool), (requests, input_tokens, output_tokens, cost) in other.usage.items():
            totals = self.usage.setdefault((month, key_id, pool), [0, 0, 0, 0.0])
            totals[0] += requests
            totals[1] += input_tokens
            totals[2] += output_tokens
            totals[3] += cost
        for (key, bucket), delta in other.adjust.items():
            self.add_adjust(key, bucket, delta)
        for key, members in other.release.items():
            self.add_release(key, members)

    def spec(self, tenant: str, keys: KeySpace, ledger_ttl_s: int) -> tuple[list[str], bytes]:
        """The KEYS and the ARGV of one ``flush.lua`` call."""
        names: list[str] = []
        numbers: dict[str, int] = {}

        def number(key: str) -> int:
            n = numbers.get(key)
            if n is None:
                names.append(key)
                n = numbers[key] = len(names)
            return n

        ledgers: dict[str, tuple[dict[str, int], dict[str, float]]] = {}
        for (month, key_id, pool), (requests, input_tokens, output_tokens, cost) in self.usage.items():
            ints, floats = ledgers.setdefault(keys.usage(tenant, month), ({}, {}))
            scopes = ["tenant"]
            if key_id:
                scopes.append(f"key:{key_id}")
            if pool:
                scopes.append(f"pool:{pool}")
            for scope in scopes:
                for metric, amount in (
                    ("requests", requests),
                    ("input_tokens", input_tokens),
                    ("output_tokens", output_tokens),
                ):
                    field = usage_field(scope, metric)
                    ints[field] = ints.get(field, 0) + amount
                field = usage_field(scope, "cost_usd")
                floats[field] = floats.get(field, 0.0) + cost
        spec: dict[str, Any] = {
            "ledger_ttl": ledger_ttl_s,
            "ledgers": [
                [number(ledger), ints, {field: repr(value) for field, value in floats.items()}]
                for ledger, (ints, floats) in ledgers.items()
            ],  # costs as strings: HINCRBYFLOAT gets every digit
            "adjust": [[number(key), bucket, delta] for (key, bucket), delta in self.adjust.items() if delta],
            "release": [[number(key), *members] for key, members in self.release.items() if members],
        }
        return names, _json(spec)
