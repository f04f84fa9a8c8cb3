"""AuditTrail: the one place the gateway records what admins (and the gateway itself) did.

It stamps each event with the injected clock and appends it to the store. Recording never fails the
action it records: an append the store refuses (Redis away, a torn file) is logged at error level
(``sortyard.audit``) and the answer goes out; ``sortyard audit verify`` shows the chain as it is.

The trail is never trimmed, so a caller must not be able to grow it at will: a refused call (401, 403)
is written once a ``refusal_window_s`` per (actor, client, action, target); the repeats in between are
counted in the next such entry's ``details.suppressed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.audit.entry import Entry, Event
from gateway.audit.store import AuditStore, AuditStoreError
from gateway.policy import ApiKey
from gateway.redis_client.resp import RespError

__all__ = ["SYSTEM", "AuditTrail"]

logger = logging.getLogger("sortyard.audit")

SYSTEM = "system"
"""The actor of what the gateway did on its own (a policy file reload, a drain on SIGTERM)."""


class AuditTrail:
    """Appends events to ``store``, stamped by ``clock`` (unix seconds)."""

    def __init__(
        self,
        store: AuditStore,
        *,
        clock: Callable[[], float] = time.time,
        refusal_window_s: float = 60.0,
        max_refusers: int = 10_000,
    ) -> None:
        self.store = store
        self.clock = clock
        self.refusal_window_s = refusal_window_s
        self.max_refusers = max_refusers
        """How many (actor, client, action, target) this process tracks; past it the oldest are dropped."""
        self._refused: dict[tuple[str, str | None, str, str], tuple[float, int]] = {}
        self._pending: set[asyncio.Task[Entry | None]] = set()

    async def record(
        self,
        actor: str,
        action: str,
        target: str = "",
        *,
        tenant: str | None = None,
        details: dict[str, Any] | None = None,
        client: str | None = None,
        status: int = 200,
    ) -> Entry | None:
        """Append one event; ``status`` 400 and up is a ``refused`` outcome. None when the store failed."""
        event = Event(
            at=self.clock(),
            actor=actor,
            action=action,
            target=target,
            tenant=tenant,
            details=details or {},
            client=client,
            outcome="ok" if status < 400 else "refused",
            status=status,
        )
        try:
            return await self.store.append(event)
        except (AuditStoreError, RespError, TimeoutError, OSError) as exc:
            logger.error("audit entry not written (%s %s by %s): %r", action, target, actor, exc)
            return None

    async def record_admin_call(
        self,
        key: ApiKey | None,
        action: str,
        target: str,
        details: dict[str, Any],
        client: str | None,
        status: int,
    ) -> Entry | None:
        """An admin API call: who by the key it presented (``-`` when none was recognised; never the
        secret), and its answer's status."""
        actor, tenant = (key.key_id, key.tenant) if key is not None else ("-", None)
        if status in (401, 403):
            suppressed = self._admit_refusal((actor, client, action, target))
            if suppressed is None:
                return None
            if suppressed:
                details = {**details, "suppressed": suppressed}
        return await self.record(
            actor, action, target, tenant=tenant, details=details, client=client, status=status
        )

    def _admit_refusal(self, who: tuple[str, str | None, str, str]) -> int | None:
        """None: a repeat inside the window (counted); else the repeats since the last one written."""
        now = self.clock()
        written_at, repeats = self._refused.get(who, (float("-inf"), 0))
        if now - written_at < self.refusal_window_s:
            self._refused[who] = (written_at, repeats + 1)
            return None
        self._refused.pop(who, None)
        if len(self._refused) >= self.max_refusers:
            del self._refused[next(iter(self._refused))]  # the oldest written
        self._refused[who] = (now, 0)
        return repeats

    def record_soon(self, actor: str, action: str, target: str = "", **fields: Any) -> None:
        """``record`` from synchronous code running on the event loop (a reload listener); dropped
        with a warning when no loop runs (a reload called from a plain script)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            logger.warning("audit entry dropped (no event loop): %s %s", action, target)
            return
        task = loop.create_task(self.record(actor, action, target, **fields))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for the entries ``record_soon`` started."""
        while self._pending:
            await asyncio.gather(*list(self._pending))

    async def close(self) -> None:
        await self.flush()
        await self.store.close()
