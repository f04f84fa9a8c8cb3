"""LeaseBook: the concurrency leases a replica holds in Redis, renewed while their requests run.

A lease in Redis is written to expire ``expiry_s`` ahead (30 s by default), not the request's whole
lifetime: the replica renews it every third of that while the request runs, never past the request's
own bound (``Admission.lease_ttl_s`` after its admission). A replica that dies, or cannot reach Redis,
stops renewing, and its leases expire at most ``expiry_s`` after their last renewal. Renewing only
extends a lease still in Redis: it never takes one back (after a restart, or once it has expired).
"""

from __future__ import annotations

import math

LEASE_EXPIRY_S = 30.0
"""How long a lease in Redis outlives its replica's last renewal."""


class Held:
    """One request's leases in Redis, their expiry and how far renewals may take them."""

    __slots__ = ("expiry_s", "leases", "tenant", "until_s")

    def __init__(
        self, tenant: str, leases: list[tuple[str, str, bool]], expiry_s: float, until_s: float
    ) -> None:
        self.tenant = tenant
        self.leases = leases
        """(lease set, member, may become a spare slot once the request ends)."""
        self.expiry_s = expiry_s
        """When the leases expire unless renewed (Unix seconds)."""
        self.until_s = until_s
        """The request's own bound: no renewal goes past it."""


class LeaseBook:
    """The leases of the requests this replica runs, by request id (see the module docstring)."""

    def __init__(self, expiry_s: float = LEASE_EXPIRY_S) -> None:
        if expiry_s <= 0:
            raise ValueError(f"lease expiry must be positive, not {expiry_s!r}")
        self.expiry_s = expiry_s
        self.renew_every_s = expiry_s / 3
        """How often held leases are renewed: each keeps two thirds of ``expiry_s`` at least."""
        self._held: dict[str, Held] = {}
        self._renewed_at_s = -math.inf

    def __len__(self) -> int:
        return len(self._held)

    def ttl_s(self, lease_ttl_s: float) -> float:
        """How far ahead a lease taken now expires: ``expiry_s``, or the request's bound if sooner."""
        return min(lease_ttl_s, self.expiry_s)

    def hold(
        self,
        request_id: str,
        tenant: str,
        leases: list[tuple[str, str, bool]],
        *,
        expiry_s: float,
        until_s: float,
    ) -> None:
        """Renew these leases until ``release(request_id)`` or ``until_s``."""
        self._held[request_id] = Held(tenant, leases, expiry_s, until_s)

    def release(self, request_id: str) -> Held | None:
        """The request ended: its leases, no longer renewed (None when it held none)."""
        return self._held.pop(request_id, None)

    def unpool(self) -> None:
        """Redis failed: a lease may be gone there (expired, or Redis restarted empty), so none of those
        held now may become a spare slot; each is released when its request ends."""
        for held in self._held.values():
            held.leases = [(key, member, False) for key, member, _ in held.leases]

    def renewals(self, now_s: float) -> dict[str, dict[str, dict[str, float]]]:
        """Once every ``renew_every_s``: tenant -> lease set -> member -> new expiry, for every lease
        held (each up to its request's bound); empty in between."""
        if now_s - self._renewed_at_s < self.renew_every_s:
            return {}
        self._renewed_at_s = now_s
        out: dict[str, dict[str, dict[str, float]]] = {}
        for held in self._held.values():
            expiry_s = min(now_s + self.expiry_s, held.until_s)
            if expiry_s <= held.expiry_s:
                continue  # at its bound already
            held.expiry_s = expiry_s
            sets = out.setdefault(held.tenant, {})
            for key, member, _ in held.leases:
                sets.setdefault(key, {})[member] = expiry_s
        return out
