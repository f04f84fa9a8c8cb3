"""Stage: rate limits, concurrency and budgets, checked in one store round trip; usage to the ledger.

For the call's key, its tenant, and the tenant's limits on the resolved pool, the store admits or
denies everything at once (requests per minute, tokens per minute, concurrent requests, monthly
budgets). Tokens are reserved up front (prompt tokens counted with tiktoken, plus the pool's chat
template overhead, plus ``max_tokens``) and settled to the upstream's reported usage when the response
ends, however it ends; a response that never reported usage (a stream the client cut off) is settled
to the same prompt count plus one output token per event relayed. A pass-through route (``/tokenize``)
counts as a request, with no tokens. The store knows each request by an id of the gateway's own
(``gateway.request_ids``), never the client's ``x-request-id``: a repeated one must not share a lease
or be taken for a settle already made. Every response
carries OpenAI's ``x-ratelimit-*`` headers; a denial is a 429 with ``Retry-After`` (code
``insufficient_quota`` for budgets), a store that cannot answer under ``fail_closed`` a 503.

A request that a fallback pool served counts against the limits of the pool the client asked for
(they were checked before any replica was picked, and its settlement corrects that same
reservation); its tokens are priced and recorded in the ledger at the pool that served it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.errors import GatewayError, RateLimited, ServiceUnavailable
from gateway.pipeline import Call, Endpoint, Usage
from gateway.replicas.pools import TemplateTokens
from gateway.request_ids import RequestIds
from gateway.responses_api import as_messages
from gateway.stores import (
    Admission,
    Settlement,
    Store,
    StoreUnavailable,
    openai_ratelimit_headers,
)
from gateway.tokens import TokenCounter

logger = logging.getLogger("sortyard.limits")


def month_of(now_s: float) -> str:
    """The UTC calendar month of ``now_s``, as ``YYYY-MM``."""
    return _month_of_day(int(now_s // 86400))  # UTC days never straddle a month


@functools.lru_cache(maxsize=4)
def _month_of_day(day: int) -> str:
    return time.strftime("%Y-%m", time.gmtime(day * 86400))  # strftime: ~2% of a request's CPU


class EnforceLimits:
    """Admits the call against the store and registers its settlement."""

    name = "limits"

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        on_reject: Callable[[str], None] | None = None,
        ids: RequestIds | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.on_reject = on_reject
        self.ids = ids or RequestIds()
        """Each request's id in the store (its leases, its settle-once mark)."""

    async def __call__(self, call: Call) -> None:
        caller = call.compiled.limits.for_caller(call.key, call.tenant, call.pool)
        rules, budgets = caller.rules, caller.budgets
        reserve = 0
        if caller.reserves_tokens:
            reserve = prompt_tokens(call) + max_output_tokens(call)
        now = self.clock()
        month = month_of(now)
        admission = Admission(
            tenant=call.tenant,
            request_id=self.ids.next_id(),  # the client's x-request-id may repeat
            rules=rules,
            budgets=budgets,
            reserve_tokens=reserve,
            now_s=now,
            lease_ttl_s=_lifetime_bound_s(call),
            month=month,
        )
        if not rules and not budgets:  # nothing to check; the ledger still counts the usage
            call.on_finish(self._settler(admission))
            return
        try:
            decision = await self.store.admit(admission)
        except StoreUnavailable as e:
            raise ServiceUnavailable(
                "Rate-limit store unavailable; try again shortly.",
                code="store_unavailable",
                headers={"Retry-After": str(max(1, round(e.retry_after_s)))},
            ) from None
        headers = openai_ratelimit_headers(decision)
        if not decision.allowed:
            if self.on_reject is not None:
                self.on_reject(decision.reason or "unknown")
            raise _denial(decision.reason, decision.scope, decision.exceeds_limit, headers)
        call.response_headers.update(headers)
        call.on_finish(self._settler(admission))

    def _settler(self, admission: Admission) -> Callable[[Call, GatewayError | None], Any]:
        async def settle(call: Call, error: GatewayError | None) -> None:
            usage = call.usage or estimated_usage(call)
            pool = served_pool(call)
            price = call.policy.pools[pool].price if pool in call.policy.pools else None
            cost = price.cost_usd(usage.input_tokens, usage.output_tokens) if price else 0.0
            settlement = Settlement(
                tenant=admission.tenant,
                request_id=admission.request_id,
                rules=admission.rules,
                budgets=admission.budgets,
                reserved_tokens=admission.reserve_tokens,
                reserved_at_s=admission.now_s,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=cost,
                pool=pool,
                key_id=call.key.key_id if call.key else "-",
                month=admission.month,
                now_s=self.clock(),
            )
            try:
                await self.store.settle(settlement)
            except StoreUnavailable:
                logger.warning("could not settle request %s: store unavailable", call.request_id)

        return settle


LEASE_MARGIN_S = 60.0
"""A lease's bound past its request's ``total_s`` (time before the upstream call and after it)."""


def _lifetime_bound_s(call: Call) -> float:
    """The longest a request holds its concurrency leases: its pool's ``total_s`` plus a margin (a
    shared store renews them up to this while the request runs, and drops them sooner if it dies)."""
    policy = call.policy
    timeouts = policy.timeouts_for(call.pool) if call.pool in policy.pools else policy.timeouts
    return timeouts.total_s + LEASE_MARGIN_S


def _denial(reason: str | None, scope: str | None, exceeds: bool, headers: dict[str, str]) -> RateLimited:
    what = {
        "requests": "requests per minute",
        "tokens": "tokens per minute",
        "concurrency": "concurrent requests",
    }.get(reason or "", "requests")
    where = f" ({scope})" if scope else ""
    if reason == "budget":
        return RateLimited(
            f"You exceeded your current quota{where}: the monthly budget is spent.",
            code="insufficient_quota",
            headers=headers,
        )
    if exceeds:
        return RateLimited(
            f"Request too large for the {what} limit{where}: lower max_tokens or the prompt.",
            code="rate_limit_exceeded",
            headers=headers,
        )
    return RateLimited(f"Rate limit reached for {what}{where}. Please try again later.", headers=headers)


_OPENAI_TEMPLATE = TemplateTokens()


def prompt_tokens(call: Call) -> int:
    """Prompt tokens as tiktoken counts them, a chat prompt with its pool's ``template_tokens`` (cached
    on the call)."""
    if call.num_prompt_tokens is None:
        counter = TokenCounter.for_model(
            call.model, default_encoding=call.policy.store.unknown_model_encoding
        )
        body, endpoint = call.body, call.endpoint
        if endpoint is Endpoint.CHAT or endpoint is Endpoint.RESPONSES:
            messages = body.get("messages") or [] if endpoint is Endpoint.CHAT else as_messages(body)
            pool = call.policy.pools.get(call.pool or "")
            template = pool.template_tokens if pool is not None else _OPENAI_TEMPLATE
            per_message, per_request = template.per_message, template.per_request
            call.num_prompt_tokens = counter.count_chat(
                messages, body.get("tools"), per_message=per_message, per_request=per_request
            )
        elif endpoint is Endpoint.COMPLETIONS:
            call.num_prompt_tokens = counter.count_prompt(body.get("prompt") or "")
        elif endpoint is Endpoint.EMBEDDINGS:
            call.num_prompt_tokens = counter.count_prompt(body.get("input") or "")
        else:  # a pass-through route: nothing is counted
            call.num_prompt_tokens = 0
    return call.num_prompt_tokens


def max_output_tokens(call: Call) -> int:
    if call.endpoint is Endpoint.EMBEDDINGS or call.endpoint is Endpoint.PASSTHROUGH:
        return 0
    body = call.body
    if call.endpoint is Endpoint.RESPONSES:
        limit = body.get("max_output_tokens")
    else:
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if not isinstance(limit, int):
        limit = call.policy.store.default_reserve_tokens
    n = body.get("n")
    return limit * (n if isinstance(n, int) and n > 0 else 1)


def served_pool(call: Call) -> str:
    """The pool whose replica answered (a fallback's, maybe), else the one asked for, else ``-``."""
    if call.replica is not None:
        return call.replica.pool
    return call.pool or "-"


def estimated_usage(call: Call) -> Usage:
    """When the upstream never reported usage (a cut stream, a client gone): our best count."""
    if call.result is None or call.endpoint is Endpoint.PASSTHROUGH:
        return Usage(0, 0)  # never reached the upstream, or a route with no tokens: nothing was used
    return Usage(prompt_tokens(call), call.num_events)
