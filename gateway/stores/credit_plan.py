"""CreditPlan: one tenant's rule set in one month, as CreditStore admits it locally.

Built once per (tenant, month, rules): the keys and checks ``admit.lua`` takes, each check's key,
the token windows a settle adjusts, and Redis's last answer (for the rate-limit headers of requests
admitted from credit).
"""

from __future__ import annotations

from typing import Any


class CreditPlan:
    """One tenant's rule set in one month: its keys and checks, and Redis's last answer."""

    __slots__ = ("checks", "key_names", "local", "snapshot", "token_keys")

    def __init__(self, key_names: list[str], checks: list[tuple[int, int, int, int]]) -> None:
        self.key_names = key_names
        self.checks = checks
        """(kind, rule number, KEYS number, limit), as admit.lua takes them."""
        self.local = [(kind, key_names[key_no - 1]) for kind, _, key_no, _ in checks]
        """(kind, key) of each check."""
        self.token_keys = [key for kind, key in self.local if kind == 2]
        """The tokens windows (settles adjust them)."""
        self.snapshot: list[Any] | None = None
        """[Redis's last decision, requests admitted from credit since, tokens likewise]."""
