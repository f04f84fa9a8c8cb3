"""What a policy reload changed, for its audit entry: the top-level sections and the pools.

Only names are recorded (``sections: ["keys", "pools"]``, ``pools: {"changed": ["small"]}``), never
values: a section such as ``keys`` holds hashes and the entry need not repeat them.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any, Protocol

import msgspec

from gateway.audit.trail import SYSTEM, AuditTrail
from gateway.policy import Policy

__all__ = ["PolicyReloadAudit", "policy_diff"]


class HoldsPolicy(Protocol):
    @property
    def policy(self) -> Policy: ...


def policy_diff(old: Policy, new: Policy) -> dict[str, Any]:
    """``{"sections": [...changed top-level fields], "pools": {"added", "removed", "changed"}}``."""
    before, after = msgspec.to_builtins(old), msgspec.to_builtins(new)
    names = (before.keys() | after.keys()) - {"source"}  # where it was read from, not a section
    sections = sorted(k for k in names if before.get(k) != after.get(k))
    old_pools, new_pools = before.get("pools") or {}, after.get("pools") or {}
    return {
        "sections": sections,
        "pools": {
            "added": sorted(new_pools.keys() - old_pools.keys()),
            "removed": sorted(old_pools.keys() - new_pools.keys()),
            "changed": sorted(p for p in old_pools.keys() & new_pools.keys() if old_pools[p] != new_pools[p]),
        },
    }


class _Actor(msgspec.Struct, frozen=True):
    name: str
    tenant: str | None = None
    client: str | None = None


class PolicyReloadAudit:
    """A reloader listener (``PolicyReloader.subscribe``) recording each adopted policy's diff, and
    (``refused``) each refused reload: the first call is the policy already serving, not a reload.
    Each gateway process records the reloads it adopts, named by ``process`` (host:pid). A reload is
    the gateway's own (``system``) unless it runs inside :meth:`acting_as` (the admin API's)."""

    def __init__(self, trail: AuditTrail, source: str) -> None:
        self.trail = trail
        self.source = source
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self._serving: Policy | None = None
        self._actor = _Actor(SYSTEM)

    @contextlib.contextmanager
    def acting_as(
        self, actor: str, *, tenant: str | None = None, client: str | None = None
    ) -> Iterator[None]:
        """Name ``actor`` (its tenant, its client address) on the entry of a reload run synchronously
        inside the block: the one entry of that reload, adopted or refused."""
        before, self._actor = self._actor, _Actor(actor, tenant, client)
        try:
            yield
        finally:
            self._actor = before

    def _record(self, details: dict[str, Any], status: int = 200) -> None:
        who = self._actor
        self.trail.record_soon(
            who.name,
            "policy.reload",
            self.source,
            tenant=who.tenant,
            client=who.client,
            details=details,
            status=status,
        )

    def __call__(self, compiled: HoldsPolicy) -> None:
        previous, self._serving = self._serving, compiled.policy
        if previous is None:
            return
        try:
            details = {**policy_diff(previous, compiled.policy), "process": self.process}
        except (TypeError, ValueError) as exc:  # recording never stands in the way of a reload
            details = {"diff_error": repr(exc), "process": self.process}
        self._record(details)

    def refused(self, error: str) -> None:
        self._record({"error": error[:500], "process": self.process}, status=422)
