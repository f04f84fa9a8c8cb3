"""KeyRegistry: the API-made keys this replica honours, kept in step with the shared store.

Each replica polls the store's version every ``refresh_s`` and reloads the records only when it
moved, so a key made, changed, rotated or revoked on any replica takes effect on every other within
``refresh_s`` plus one store round trip (the documented bound is one second). The replica that made
the change refreshes at once. When the store cannot be read the last records stay in force and the
poll keeps trying (a Redis outage never locks every caller out).

A request's key is found by the SHA-256 of what it presented (a dictionary lookup: a timing
difference could tell an attacker at most how a guess's hash begins, never the key), then checked
against the key's state and the secret's grace period at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gateway.keys.records import KeyRecord, Secret
from gateway.keys.store import KeyStore
from gateway.policy import ApiKey

__all__ = ["KeyRegistry"]

log = logging.getLogger("sortyard.gateway.keys")


class KeyRegistry:
    """The store's keys by secret hash, refreshed when the store's version moves."""

    def __init__(
        self, store: KeyStore, *, refresh_s: float = 0.5, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.clock = clock
        self.records: dict[str, KeyRecord] = {}
        """Every API-made key by name, revoked and expired ones included (the admin API lists them)."""
        self.version = -1
        self._by_hash: dict[str, tuple[KeyRecord, Secret, ApiKey]] = {}
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def find(self, sha256: str) -> ApiKey | None:
        """The key a secret with this hash opens now, or None."""
        entry = self._by_hash.get(sha256)
        if entry is None:
            return None
        record, secret, key = entry
        return key if record.opens(secret, self.clock()) else None

    async def refresh(self) -> None:
        """Reload the records if the store's version moved (raises what the store raises)."""
        if await self.store.version() == self.version:
            return
        version, records = await self.store.load()
        by_hash = {}
        for record in records:
            for secret in record.secrets:
                by_hash[secret.sha256] = (record, secret, record.api_key(secret))
        self.records = {record.name: record for record in records}
        self._by_hash, self.version = by_hash, version

    async def start(self) -> None:
        """Load the keys (a store that cannot be read yet leaves none), then poll in the background."""
        await self._refresh_logged()
        if self._task is None:
            self._task = asyncio.create_task(self._poll(), name="key-registry-poll")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            await self._refresh_logged()

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # Redis down or slow: keep the last keys, say so once
            if not self._failing:
                log.warning("cannot read the key store (keeping the last keys): %r", exc)
            self._failing = True
        else:
            if self._failing:
                log.info("key store readable again")
            self._failing = False
