"""PendingWrites: what a replica owes Redis for one tenant, summed until it is sent.

Settles add usage (per month, key and pool), token corrections (per window and bucket second) and
lease releases; unspent credit adds negative corrections; held leases add renewals. ``spec`` turns it
into one ``lua/flush.lua`` call under a write id: flush.lua applies each id once, so a write sent again
after a timeout (it may have run when Redis resumed) is not applied twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gateway.stores.base import usage_field
from gateway.stores.key_names import KeySpace

_json = msgspec.json.Encoder().encode

_MAX_PENDING_RELEASES = 10000
"""Lease releases kept per lease set while Redis is away (past that, leases expire by themselves)."""
WRITTEN_TTL_S = 300
"""How long flush.lua remembers the ids it applied. Copies of a write that timed out run when Redis
resumes; the replica sends it again within a couple of seconds after that (its next flush)."""


class PendingWrites:
    """What one tenant's settles, refunds and renewals left to write."""

    __slots__ = ("adjust", "release", "renew", "usage")

    def __init__(self) -> None:
        self.usage: dict[tuple[str, str, str], list[Any]] = {}
        """(month, key id, pool) -> [requests, input tokens, output tokens, cost in USD]."""
        self.adjust: dict[tuple[str, int], int] = {}
        """(window key, bucket second) -> change."""
        self.renew: dict[str, dict[str, float]] = {}
        """Lease set -> member -> new expiry (Unix seconds)."""
        self.release: dict[str, list[str]] = {}
        """Lease set -> members to remove."""

    def empty(self) -> bool:
        return not (self.usage or self.adjust or self.renew or self.release)

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

    def add_renew(self, key: str, members: Mapping[str, float]) -> None:
        held = self.renew.setdefault(key, {})
        for member, expiry_s in members.items():
            held[member] = max(expiry_s, held.get(member, expiry_s))

    def add_release(self, key: str, members: Sequence[str]) -> None:
        held = self.release.setdefault(key, [])
        if len(held) < _MAX_PENDING_RELEASES:  # past that, the leases' own expiry frees them
            held.extend(members)

    def spec(
        self, tenant: str, keys: KeySpace, ledger_ttl_s: int, *, now_s: float, write_id: str
    ) -> tuple[list[str], bytes]:
        """The KEYS and the ARGV of one ``flush.lua`` call; KEYS[1] remembers the write ids applied."""
        names: list[str] = [keys.written(tenant, now_s)]
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
            "id": write_id,
            "written_ttl": WRITTEN_TTL_S,
            "now": now_s,
            "ledger_ttl": ledger_ttl_s,
            "ledgers": [
                [number(ledger), ints, {field: repr(value) for field, value in floats.items()}]
                for ledger, (ints, floats) in ledgers.items()
            ],  # costs as strings: HINCRBYFLOAT gets every digit
            "adjust": [[number(key), bucket, delta] for (key, bucket), delta in self.adjust.items() if delta],
            "renew": [
                [number(key), *(x for member, expiry in members.items() for x in (member, expiry))]
                for key, members in self.renew.items()
                if members
            ],
            "release": [[number(key), *members] for key, members in self.release.items() if members],
        }
        return names, _json(spec)
