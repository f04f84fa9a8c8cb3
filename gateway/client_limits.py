"""Per-client limits on unauthenticated work: failed authentications, and requests to the open endpoints.

What is limited is the policy's ``limits.unauthenticated`` (failed authentications per minute, requests
per minute to ``/metrics`` and ``/openapi.json``); who is counted is the request's client
(``gateway.client_address``); where counts live is the store every other limit uses. A hit is an
``Admission`` with one requests-per-minute rule under the client's own hash-tagged root
(``sy:{t:@client:<address>}:rpm:auth_failures``: ``@`` is never in a tenant name), so the count is
the same sliding 60 s window, exact across replicas sharing one Redis, in this process for the embedded
default, and a failing Redis does what ``store.on_failure`` says (``fail_open``: counted in this
process meanwhile; ``fail_closed``: 503). A hit has no request id: nothing to lease or settle.

Requests to the open endpoints are counted per replica, in this process, whatever the store: each
replica's ``/metrics`` is scraped on its own (a shared bound would throttle one Prometheus scraping N
replicas), the bound protects this replica's CPU, and a scrape must answer while Redis is down.

Only failures are counted, after the key was looked up: a valid key from a client past its bound still
passes (the bound is on guessing, not on the client), and a valid request never waits on the store for
this. A failure past the bound is a 429 ``too_many_auth_failures`` with Retry-After; the client is
remembered as refused until then, so further failures are refused without a store call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from gateway.compiled import CompiledPolicy
from gateway.errors import RateLimited, ServiceUnavailable
from gateway.stores import Admission, LimitRule, MemoryStore, Store, StoreUnavailable

__all__ = ["AUTH_FAILURES", "OPEN_ROUTES", "ClientLimiter"]

AUTH_FAILURES = "auth_failures"
"""The scope (and metric reason) of failed authentications."""
OPEN_ROUTES = "open_routes"
"""The scope (and metric reason) of requests to ``/metrics`` and ``/openapi.json``."""
_NO_MONTH = "1970-01"  # a hit has no budget: the month only names a ledger key it never touches
_MESSAGES = {
    AUTH_FAILURES: "Too many failed authentications from this address; try again in {s} seconds.",
    OPEN_ROUTES: "Too many requests from this address to this endpoint; try again in {s} seconds.",
}
_CODES = {AUTH_FAILURES: "too_many_auth_failures", OPEN_ROUTES: "rate_limit_exceeded"}


class ClientLimiter:
    """Counts failed authentications and open-endpoint requests per client (see the module docstring).

    Args:
        store: the limits store (``gateway.state_factories.build_store``), shared with the limits stage:
            failed authentications are counted there.
        local: this replica's own store, for the open endpoints (default a fresh ``MemoryStore``).
        clock: Unix seconds (replicas sharing a Redis must share the clock's epoch).
        on_refuse: called with the scope (``auth_failures``, ``open_routes``) of each refusal, for a
            metric.
        max_refused: clients remembered as refused at most (the memo starts afresh past it).
    """

    def __init__(
        self,
        store: Store,
        *,
        local: Store | None = None,
        clock: Callable[[], float] = time.time,
        on_refuse: Callable[[str], None] | None = None,
        max_refused: int = 65_536,
    ) -> None:
        self.store = store
        self.local = local if local is not None else MemoryStore()
        self.clock = clock
        self.on_refuse = on_refuse
        self.max_refused = max_refused
        self._refused_until: dict[tuple[str, str, int], float] = {}
        """(scope, client, limit) -> Unix time a hit can pass again."""

    async def count_failure(
        self, compiled: CompiledPolicy, peer: str | None, headers: Mapping[str, str]
    ) -> None:
        """A failed authentication from the request's client: counted; RateLimited (429
        ``too_many_auth_failures``) when it is past the policy's bound."""
        limit = compiled.policy.limits.unauthenticated.failed_auths_per_minute
        if limit is not None:
            await self._hit(compiled, AUTH_FAILURES, limit, peer, headers)

    async def count_request(
        self, compiled: CompiledPolicy, peer: str | None, headers: Mapping[str, str]
    ) -> None:
        """A request to an open endpoint: counted; RateLimited (429) when it is past the bound."""
        limit = compiled.policy.limits.unauthenticated.requests_per_minute
        if limit is not None:
            await self._hit(compiled, OPEN_ROUTES, limit, peer, headers)

    async def _hit(
        self, compiled: CompiledPolicy, scope: str, limit: int, peer: str | None, headers: Mapping[str, str]
    ) -> None:
        client = compiled.clients.client_of(peer, headers.get("x-forwarded-for"))
        now = self.clock()
        memo = (scope, client, limit)
        until = self._refused_until.get(memo)
        if until is not None:
            if now < until:  # refused a moment ago: no store call until it can pass
                raise self._refusal(scope, until - now)
            del self._refused_until[memo]
        admission = Admission(
            tenant=f"@client:{client}",
            request_id="",
            rules=(LimitRule(scope, requests_per_minute=limit),),
            budgets=(),
            reserve_tokens=0,
            now_s=now,
            lease_ttl_s=0.0,
            month=_NO_MONTH,
        )
        try:
            store = self.local if scope == OPEN_ROUTES else self.store
            decision = await store.admit(admission)
        except StoreUnavailable as e:  # fail_closed: what cannot be counted is refused
            raise ServiceUnavailable(
                "Rate-limit store unavailable; try again shortly.",
                code="store_unavailable",
                headers={"Retry-After": str(max(1, round(e.retry_after_s)))},
            ) from None
        if decision.allowed:
            return
        if len(self._refused_until) >= self.max_refused:
            self._refused_until.clear()
        self._refused_until[memo] = now + decision.retry_after_s
        raise self._refusal(scope, decision.retry_after_s)

    def _refusal(self, scope: str, retry_after_s: float) -> RateLimited:
        if self.on_refuse is not None:
            self.on_refuse(scope)
        seconds = max(1, math.ceil(retry_after_s))
        return RateLimited(
            _MESSAGES[scope].format(s=seconds), code=_CODES[scope], headers={"Retry-After": str(seconds)}
        )
