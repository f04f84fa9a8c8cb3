"""bench/limits_path.py runs the real auth and limits stages; a short run of each policy."""

from __future__ import annotations

from pathlib import Path

from bench.limits_path import _policy, cpu_us_per_request
from gateway.stores import MemoryStore


async def test_measures_both_policies(tmp_path: Path) -> None:
    for template in ("policy.yaml.tmpl", "policy-limits.yaml.tmpl"):
        store = MemoryStore()
        assert await cpu_us_per_request(_policy(template, tmp_path), store, 20) > 0
        report = await store.usage(next(iter(store._ledger)))
        assert report.tenants["bench"].total.requests == 2020  # warm-up included: every call settled
