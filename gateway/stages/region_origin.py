"""Where a request comes from, for region ranking (``gateway.replicas.regions``), and how its pick went,
for the response's headers and the metrics.

The origin is the client's region when the policy names a ``routing.regions.client_header`` and the
request came through one of the policy's trusted proxies (``limits.unauthenticated.trusted_proxies``:
a client could write anything in that header), else None: the gateway's own region.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.client_address import parse_address
from gateway.pipeline import Call
from gateway.replicas.config import REGION_NAME
from gateway.replicas.regions import RegionPick

__all__ = ["RegionObserver", "origin_of", "report_region"]

RegionObserver = Callable[[str, RegionPick], None]
"""Called with ``(pool, pick)`` for each pick in a pool with regions (``Metrics.count_region_pick``)."""


def origin_of(call: Call) -> str | None:
    """The client's region from the trusted header, or None (the gateway's own region)."""
    header = call.policy.routing.regions.client_header
    if header is None:
        return None
    value = call.headers.get(header)
    if not value or not REGION_NAME.match(value):
        return None
    peer = parse_address(call.peer) if call.peer else None
    if peer is None or not call.compiled.clients.is_trusted(peer):
        return None
    return value


def report_region(call: Call, pool: str, pick: RegionPick, observe: RegionObserver | None) -> None:
    """``x-sortyard-region`` (the region that served) and, when it was not the nearest,
    ``x-sortyard-region-spill`` (``eu-west -> us-east: saturated``); the metric."""
    call.response_headers["x-sortyard-region"] = pick.region or "-"
    if pick.spilled_from is not None:
        call.response_headers["x-sortyard-region-spill"] = (
            f"{pick.spilled_from or '-'} -> {pick.region or '-'}: {pick.reason}"
        )
    else:
        call.response_headers.pop("x-sortyard-region-spill", None)  # a retry that stayed near
    if observe is not None:
        observe(pool, pick)
