"""Stage: call the upstream, retrying failed attempts on another replica before the first byte.

A connect error (a connect timeout included), a 5xx, a malformed answer or an upstream 429 is
retried on another replica of the pool (or the same one when it is the only one), with jittered
exponential backoff, while attempts remain and the request's deadline (``total_s`` from its
arrival) allows. A replica that answered 429 asked for time: this request does not go back to it,
and when every replica has, the client gets the last 429 with its ``Retry-After``. Nothing is
retried once bytes have reached the client: a stream that fails later ends with an error event.

A timeout of a request the replica accepted is retried only with the policy's ``retry.on_timeout``:
a replica too slow to answer is usually busy, and a second replica would do the same long work
again. Only streams can time out early (``first_byte_s``); a plain request waits for its headers
until the deadline (see ``gateway.stages.upstream``), so it has nothing left to retry with.

Every failed attempt is reported to ``on_attempt_error(pool, error)`` except the one the call ends
with, which is the call's own error (``sortyard_upstream_errors_total`` counts both).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from gateway.errors import (
    GatewayError,
    ServiceUnavailable,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.pipeline import Call
from gateway.replicas.balancer import ReplicaState
from gateway.stages.pick import PickReplica
from gateway.stages.upstream import CallUpstream


def is_retryable(error: Exception, *, on_timeout: bool) -> bool:
    if isinstance(error, UpstreamStatusError):
        return error.upstream_status == 429
    if isinstance(error, UpstreamTimeout):
        return on_timeout
    return isinstance(error, UpstreamError)


AttemptErrorListener = Callable[[str, GatewayError], None]
"""Called with ``(pool, error)`` for each failed upstream attempt but the one the call ends with."""


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
        on_attempt_error: AttemptErrorListener | None = None,
    ) -> None:
        self.pick = pick
        self.upstream = upstream
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.on_attempt_error = on_attempt_error

    async def __call__(self, call: Call) -> None:
        failures: list[tuple[str, UpstreamError | UpstreamTimeout]] = []
        ending: BaseException | None = None
        try:
            await self._attempts(call, failures)
        except BaseException as error:
            ending = error
            raise
        finally:
            if self.on_attempt_error is not None:
                for pool, failure in failures:
                    if failure is not ending:  # the call's own error is counted with the call
                        self.on_attempt_error(pool, failure)

    async def _attempts(
        self, call: Call, failures: list[tuple[str, UpstreamError | UpstreamTimeout]]
    ) -> None:
        assert call.pool is not None
        policy = call.policy.retry
        deadline = call.deadline
        tried: list[ReplicaState] = []
        limited: list[ReplicaState] = []  # answered 429: not asked again by this request
        last_error: UpstreamError | UpstreamTimeout | None = None
        while True:
            call.attempts += 1
            try:
                await self.pick(call, tuple(tried))
            except ServiceUnavailable:
                if last_error is None:
                    raise
                try:
                    await self.pick(call, tuple(limited))  # every replica was tried: the best one again
                except ServiceUnavailable:
                    raise last_error from None  # none left at all: the real failure, not "none healthy"
            try:
                await self.upstream(call)
                return
            except (UpstreamError, UpstreamTimeout) as error:
                assert call.replica is not None
                failures.append((call.replica.pool, error))
                last_error = error
                retryable = is_retryable(error, on_timeout=policy.on_timeout)
                if not retryable or call.attempts >= policy.max_attempts:
                    raise
                tried.append(call.replica)
                if isinstance(error, UpstreamStatusError):
                    limited.append(call.replica)
                backoff = min(policy.max_backoff_s, policy.backoff_s * 2 ** (call.attempts - 1))
                backoff *= self.rng.uniform(0.5, 1.5)
                if self.clock() + backoff >= deadline:
                    raise
                await self.sleep(backoff)
