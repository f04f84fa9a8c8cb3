"""Active health checks: ``GET /health`` probes that trip and close breakers, and ``/metrics`` scrapes.

One asyncio task (``start()`` at app start-up, ``await stop()`` at shutdown) walks the balancer's
replicas and launches, for each one that is due, at most one probe and one scrape at a time:

- **probe**: ``GET`` the replica's health URL (its origin + its kind's health path, ``/health`` for
  most; a per-replica
  URL in ``routing.pools.<pool>.health_urls``) with a short timeout, never a paid completion. No
  answer, a timeout or HTTP 5xx is a failed probe; any other status means the server is up (a
  hosted API without ``/health`` answers 404: up). ``unhealthy_threshold`` failures in a row open
  the breaker (``trip``); ``healthy_threshold`` good probes close a breaker that probes opened.
- **scrape** (pools with ``scrape_interval_s``, or using ``load_aware``): ``GET`` the replica's load
  page (its kind's: vLLM's ``/metrics`` with ``vllm:num_requests_waiting``, ``_running`` and
  ``kv_cache_usage_perc``; TGI's, llama.cpp's, Triton's or Ollama's own, ``gateway.adapters``) and
  read it into the replica's state; the figures count for three scrape intervals, then the
  strategy ignores them.

The replica list is re-read on every tick, so a policy reload adds and drops replicas within
``max_tick_s``. HTTP goes through the injected ``UpstreamClient.get``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from gateway.adapters import ReplicaLoad, parse_vllm_metrics
from gateway.errors import GatewayError
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.client import UpstreamClient
from gateway.replicas.regions import observe_rtt

__all__ = ["HealthChecker", "ReplicaLoad", "parse_vllm_metrics"]

logger = logging.getLogger("sortyard.health")

FRESH_SCRAPES = 3
"""Scraped load counts for this many scrape intervals."""


@dataclass(slots=True, eq=False)
class _Schedule:
    next_probe_at: float = 0.0
    next_scrape_at: float = 0.0
    probe_task: asyncio.Task[bool] | None = None
    scrape_task: asyncio.Task[bool] | None = None
    consecutive_failures: int = 0
    consecutive_successes: int = 0


class HealthChecker:
    """Probes and scrapes the balancer's replicas in the background."""

    def __init__(self, balancer: Balancer, client: UpstreamClient, *, max_tick_s: float = 0.5) -> None:
        self.balancer = balancer
        self.client = client
        self.max_tick_s = max_tick_s
        self.num_probes = 0
        self.num_probe_failures = 0
        self.num_scrapes = 0
        self.num_scrape_failures = 0
        self._schedules: dict[ReplicaState, _Schedule] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background task (inside a running event loop)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="sortyard-health")

    async def stop(self) -> None:
        """Cancel the background task and every probe or scrape in flight."""
        tasks: list[asyncio.Task[Any]] = [self._task] if self._task is not None else []
        for schedule in self._schedules.values():
            tasks += [t for t in (schedule.probe_task, schedule.scrape_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None

    async def _run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self._sleep_s())

    def tick(self) -> None:
        """Launch every probe and scrape that is due (at most one of each per replica in flight)."""
        now = self.balancer.clock()
        replicas = set(self.balancer.all_replicas())
        for gone in [s for s in self._schedules if s not in replicas]:  # dropped by a reload
            del self._schedules[gone]
        for state in replicas:
            schedule = self._schedules.get(state)
            if schedule is None:
                schedule = self._schedules[state] = _Schedule()
            interval_s = state.health.probe_interval_s
            if interval_s > 0 and schedule.probe_task is None and now >= schedule.next_probe_at:
                schedule.next_probe_at = now + interval_s
                schedule.probe_task = asyncio.create_task(self._probe_then_free(state, schedule))
            interval_s = state.scrape_interval_s
            if interval_s > 0 and schedule.scrape_task is None and now >= schedule.next_scrape_at:
                schedule.next_scrape_at = now + interval_s
                schedule.scrape_task = asyncio.create_task(self._scrape_then_free(state, schedule))

    async def _probe_then_free(self, state: ReplicaState, schedule: _Schedule) -> bool:
        try:
            return await self.probe(state)
        finally:
            schedule.probe_task = None

    async def _scrape_then_free(self, state: ReplicaState, schedule: _Schedule) -> bool:
        try:
            return await self.scrape(state)
        finally:
            schedule.scrape_task = None

    def _sleep_s(self) -> float:
        now = self.balancer.clock()
        next_at = now + self.max_tick_s
        for state, schedule in self._schedules.items():
            if state.health.probe_interval_s > 0:
                next_at = min(next_at, schedule.next_probe_at)
            if state.scrape_interval_s > 0:
                next_at = min(next_at, schedule.next_scrape_at)
        return max(0.005, next_at - now)

    async def _get(self, url: str, timeout_s: float) -> tuple[int, bytes] | None:
        """Status and body, or None when the replica did not answer in time."""
        try:
            async with asyncio.timeout(timeout_s):  # the client's own timeout, enforced here too
                return await self.client.get(url, timeout_s)
        except (GatewayError, OSError, TimeoutError) as e:
            logger.debug("GET %s failed: %s", url, e)
            return None

    async def probe(self, state: ReplicaState) -> bool:
        """Probe one replica now and act on its breaker; True when it is up."""
        schedule = self._schedules.setdefault(state, _Schedule())
        started = time.perf_counter()
        answer = await self._get(state.health_url, state.health.probe_timeout_s)
        is_up = answer is not None and answer[0] < 500
        if is_up:  # how far it is, for region ranking
            observe_rtt(state, time.perf_counter() - started)
        now = self.balancer.clock()
        self.num_probes += 1
        if is_up:
            schedule.consecutive_failures = 0
            schedule.consecutive_successes += 1
            if schedule.consecutive_successes >= state.health.healthy_threshold:
                state.breaker.probe_ok(now)
        else:
            self.num_probe_failures += 1
            schedule.consecutive_successes = 0
            schedule.consecutive_failures += 1
            if schedule.consecutive_failures >= state.health.unhealthy_threshold:
                state.breaker.trip(now, by_probe=True)
        return is_up

    async def scrape(self, state: ReplicaState) -> bool:
        """Read one replica's ``/metrics`` into its state now; True when the page had load figures."""
        outstanding = state.outstanding  # ours as the page is asked for: its running count includes them
        answer = await self._get(state.metrics_url, state.health.probe_timeout_s)
        self.num_scrapes += 1
        load = state.adapter.parse_load(answer[1]) if answer is not None and answer[0] == 200 else None
        if load is None:
            self.num_scrape_failures += 1
            return False
        state.num_waiting = load.num_waiting
        state.num_running = load.num_running
        state.outstanding_at_scrape = outstanding
        state.kv_cache_usage = load.kv_cache_usage
        interval_s = state.scrape_interval_s or state.health.probe_interval_s or 1.0
        state.load_fresh_until = self.balancer.clock() + FRESH_SCRAPES * interval_s
        return True
