"""``BatchFeature``: the Files and Batch APIs put together for one gateway process: the state (in Redis
when the policy's store URL is set, else in memory), the service, the routes and the runner."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.batches.metrics import BatchMetrics
from gateway.batches.redis_state import RedisBatchState
from gateway.batches.routes import batch_routes
from gateway.batches.runner import BatchRunner
from gateway.batches.service import BatchService
from gateway.batches.state import BatchState, MemoryBatchState
from gateway.lifecycle import Observer
from gateway.policy import Policy

if TYPE_CHECKING:
    from gateway.instance import Gateway

__all__ = ["BatchFeature", "build_batch_state"]

MIN_TIMEOUT_S = 2.0
"""A batch call's bound on Redis: none is on a client's path, so a slow Redis is waited for longer."""


def build_batch_state(policy: Policy) -> BatchState:
    """Redis when the policy's store URL is set (every gateway on it shares the batches), else memory."""
    url = os.environ.get(policy.store.url_env) if policy.store.url_env else None
    if url:
        return RedisBatchState.from_url(url, timeout_s=max(policy.store.timeout_s, MIN_TIMEOUT_S))
    return MemoryBatchState()


class BatchFeature:
    """The batch state, service, routes and runner of one gateway; ``start``/``stop`` with the app."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        state: BatchState | None = None,
    ) -> None:
        policy = gateway.policy
        self.service = BatchService(state or build_batch_state(policy), policy.batches.files_dir, clock=clock)
        self.runner = BatchRunner(gateway, self.service, observer, BatchMetrics(gateway.metrics.registry))
        self.routes = batch_routes(gateway, self.service, self.runner.wake)

    async def start(self) -> None:
        self.runner.start()

    async def stop(self) -> None:
        """The runner first (its lines handed back), then the state's connection."""
        await self.runner.stop()
        await self.service.close()
