"""The running gateway (``Gateway``, one a process): the long-lived parts every request uses.

``Gateway`` holds the policy source (``reloader``: the compiled policy a request starts under), the
store of limits and usage, the per-client limits on unauthenticated work, the caches, the replica
balancer and its health checker, the upstream client, the metrics, the pipeline, the count of
requests whose work is not over, and whether the process is draining (told to stop: readiness
fails, open requests finish). It serves nothing itself: ``gateway.proxy`` owns a request's path,
``gateway.routes`` the other endpoints, and ``gateway.app`` assembles them.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from typing import Literal

from gateway.client_limits import ClientLimiter
from gateway.compiled import CompiledPolicy
from gateway.drain_mark import DrainMark
from gateway.inflight import InFlight
from gateway.keys import FileKeyStore, KeyAdmin, KeyRegistry
from gateway.pipeline import Pipeline
from gateway.policy import Policy
from gateway.reloader import PolicyReloader
from gateway.replicas.balancer import Balancer
from gateway.replicas.client import UpstreamClient
from gateway.replicas.health import HealthChecker
from gateway.settings import Settings
from gateway.state_factories import Caches
from gateway.stores import Store
from gateway.telemetry.metrics import Metrics

__all__ = ["DrainSource", "Gateway"]

DrainSource = Literal["signal", "admin"]


class Gateway:
    """The serving policy, replica state, store, caches, upstream client, metrics and pipeline."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: UpstreamClient,
        reloader: PolicyReloader,
        metrics: Metrics,
        store: Store,
        caches: Caches,
        balancer: Balancer,
        pipeline: Pipeline,
        clients: ClientLimiter | None = None,
        keys: KeyRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.reloader = reloader
        self.metrics = metrics
        self.store = store
        self.caches = caches
        self.balancer = balancer
        self.health = HealthChecker(balancer, client)
        self.pipeline = pipeline
        self.clients = clients or ClientLimiter(store, on_refuse=metrics.count_client_refusal)
        """Per-client limits on unauthenticated work (failed authentications, the open endpoints)."""
        self.keys = keys or KeyRegistry(FileKeyStore(None), refresh_s=settings.keys_refresh_s)
        """Keys made at run time (the admin API's), polled from the shared key store."""
        self.key_admin = KeyAdmin(self.keys)
        self.inflight = InFlight()
        """Proxied requests whose response or after-response work is not over (gateway.proxy counts)."""
        self.draining_since: float | None = None
        """When (monotonic) this process was told to stop: from then on ``/readyz`` answers 503."""
        self.drain_source: DrainSource | None = None
        """Who began the drain: ``signal`` (SIGTERM, Ctrl-C: shutting down) or ``admin`` (the admin
        API's ``POST /v1/admin/drain``, which ``stop_draining`` may undo)."""
        self.drain_mark = DrainMark(settings.drain_file)
        """An admin drain, shared with the other workers of this instance."""
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(6).hex()
        reloader.subscribe(lambda compiled: balancer.update(compiled.policy))
        self._is_loaded = False
        reloader.subscribe(self._count_reload)  # called now with the policy loaded at start: not a reload
        self._is_loaded = True
        reloader.refusal_listeners.append(lambda _error: self.metrics.policy_reloads.labels("refused").inc())

    @property
    def compiled(self) -> CompiledPolicy:
        """The policy new requests start under."""
        return self.reloader.compiled

    @property
    def policy(self) -> Policy:
        return self.reloader.compiled.policy

    @property
    def is_draining(self) -> bool:
        """True once SIGTERM (or Ctrl-C, or an admin drain of this process or of any worker of its
        instance) arrived: still serving, but leaving the load balancer."""
        return self.draining_since is not None or self.drain_mark.is_set()

    def start_draining(self, source: DrainSource = "signal") -> None:
        """Fail readiness from now on (a repeat is a no-op, but a signal after an admin drain makes it
        a shutdown); after a signal the server stops taking connections later (``gateway.cli.serve``).
        With workers, an admin drain is the instance's: it lives in the mark every worker reads, and
        any worker's ``stop_draining`` undoes it."""
        if source == "admin" and self.drain_mark.path is not None:
            self.drain_mark.set()
            return
        if self.draining_since is None:
            self.draining_since = time.monotonic()
            self.drain_source = source
        elif source == "signal":
            self.drain_source = source

    def stop_draining(self) -> bool:
        """Be ready again after an admin drain (the instance's, whichever worker it reached); False
        (still draining) when a signal began it or followed it: the process is shutting down."""
        if self.drain_source == "signal":
            return False
        self.draining_since = self.drain_source = None
        self.drain_mark.clear()
        return True

    def _count_reload(self, compiled: CompiledPolicy) -> None:
        if self._is_loaded:
            self.metrics.policy_reloads.labels("adopted").inc()

    async def settle(self) -> None:
        """Wait until every open request's after-response work has run, then have the store write what
        it batched: from then on the store, caches and metrics show every request answered so far.
        (A drain before shutdown; tests call it instead of guessing how long that work takes.)"""
        await self.inflight.wait_idle()
        await self.store.flush()

    def request_id(self, headers: Mapping[str, str]) -> str:
        """The client's ``x-request-id`` when it is sane, else a fresh one (a counter, not a uuid)."""
        given = headers.get("x-request-id")
        if given and len(given) <= 128 and given.isascii() and given.isprintable():
            return given
        return f"{self._id_prefix}{next(self._ids):x}"
