"""``sortyard policy check``: load policy files as the gateway would, without serving."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gateway.policy import PolicyError, load_policy


def policy_check(paths: Sequence[str]) -> int:
    """A summary line for each valid file, an error on standard error for each invalid one (exit 1)."""
    status = 0
    for path in paths:
        try:
            policy = load_policy(path)
        except PolicyError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        replicas = sum(len(p.replicas) for p in policy.pools.values())
        print(f"{path}: ok ({len(policy.pools)} pools, {replicas} replicas, {len(policy.aliases)} aliases)")
    return status
