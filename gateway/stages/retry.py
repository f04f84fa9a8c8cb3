"""Stage: call the upstream, retrying failed attempts on another replica before the first byte.

A connect error, a 5xx, a malformed answer, an upstream 429 (and, when the policy says so, a
timeout before the response started) is retried on another replica of the pool (or the same one
when it is the only one), with jittered exponential backoff, while attempts remain and the
request's deadline allows. Nothing is retried once bytes have reached the client: a stream that
fails later ends with an error event.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from gateway.errors import (
    ServiceUnavailable,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.pipeline import Call
from gateway.routing.balancer import ReplicaState
from gateway.stages.pick import PickReplica
from gateway.stages.upstream import CallUpstream


def is_retryable(error: Exception, *, on_timeout: bool) -> bool:
    if isinstance(error, UpstreamStatusError):
        return error.upstream_status == 429
    if isinstance(error, UpstreamTimeout):
        return on_timeout
    return isinstance(error, UpstreamError)


class CallWithRetries:
    """Pick a replica and call it; on a retryable failure, pick another and try again."""

    name = "upstream"

    def __init__(
        self,
        pick: PickReplica,
        upstream: CallUpstream,
        *,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.pick = pick
        self.upstream = upstream
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()

    async def __call__(self, call: Call) -> None:
        assert call.pool is not None
        policy = call.policy.retry
        deadline = call.started_at + call.policy.timeouts_for(call.pool).total_s
        tried: list[ReplicaState] = []
        last_error: UpstreamError | UpstreamTimeout | None = None
        while True:
            call.attempts += 1
            try:
                await self.pick(call, tuple(tried))
            except ServiceUnavailable:
                if last_error is None:
                    raise
                try:
                    await self.pick(call)  # every replica was tried: the best one again
                except ServiceUnavailable:
                    raise last_error from None  # none left at all: the real failure, not "none healthy"
            try:
                await self.upstream(call)
                return
            except (UpstreamError, UpstreamTimeout) as error:
                last_error = error
                retryable = is_retryable(error, on_timeout=policy.on_timeout)
                if not retryable or call.attempts >= policy.max_attempts:
                    raise
                assert call.replica is not None
                tried.append(call.replica)
                backoff = min(policy.max_backoff_s, policy.backoff_s * 2 ** (call.attempts - 1))
                backoff *= self.rng.uniform(0.5, 1.5)
                if self.clock() + backoff >= deadline:
                    raise
                await self.sleep(backoff)
