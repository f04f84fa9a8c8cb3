"""RedisStore: limits, leases and the ledger in Redis, shared by every gateway replica.

One EVALSHA per admit and one per settle (``lua/admit.lua``, ``lua/settle.lua``, shipped as package
files). Each call declares only the keys its rules limit (``key_layouts.py``) and passes the rest as
one JSON argument (``lua_codec.py``). ``script_runner.py`` makes the calls: by SHA1, loaded again on
NOSCRIPT, concurrent calls with the same keys sharing one EVALSHA, each bounded by ``timeout_s`` end
to end; any failure to answer becomes ``StoreUnavailable`` at once (no retries of the call here: the
failover wrapper decides what happens next).

Leases are written to expire ``lease_expiry_s`` ahead and renewed while their request runs
(``leases.py``). A call that timed out may still run when a stalled Redis resumes: the leases of an
admit that failed so are released by a later write on the same connection (so after it), and a
settle is applied once per request id however often it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.connect import Connection, open_client
from gateway.redis_client.deadline import Deadline
from gateway.redis_client.resp import RespError
from gateway.stores.base import (
    Admission,
    Decision,
    Settlement,
    StoreUnavailable,
    TenantUsage,
    UsageReport,
    tenant_usage_from_fields,
)
from gateway.stores.key_layouts import KeyLayouts
from gateway.stores.key_names import KeySpace
from gateway.stores.leases import LEASE_EXPIRY_S, LeaseBook
from gateway.stores.lua_codec import admit_spec, read_admit_reply, settle_spec
from gateway.stores.script_runner import LuaScript, ScriptRunner
from gateway.stores.writeback import WriteBack

logger = logging.getLogger("sortyard.stores")

_LEDGER_TTL_S = 400 * 86400  # 13 months and a bit


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStore:
    """The Store protocol on Redis (standalone, Sentinel, or Cluster thanks to the per-tenant hash tag).

    Args:
        url_or_client: a Redis URL (any form of ``gateway/redis_client/url.py``), or a ``RespCommands``
            connection the caller owns (then
            every call goes through it, one EVALSHA per call).
        timeout_s: the most one admit or settle may take, connection included.
        admin_timeout_s: the bound for ``usage`` (it scans every tenant's ledger).
        prefix: the first part of every key.
        settled_ttl_s: how long a settled request id is remembered (a repeat settle after that would count
            again; settles come within the request's own lifetime).
        ledger_ttl_s: how long a month's ledger lives after its last settle.
        lease_expiry_s: how long a concurrency lease outlives its replica's last renewal (a replica that
            dies frees its leases within this); see ``leases.py``.
        clock: Unix seconds, for renewing leases (replicas must share the clock's epoch).
        num_connections: hot-path connections (to each node), commands spread by their tenant's slot
            so one tenant's calls keep their order; two measured ~1.6x the admits/s of one on two
            cores (docs/scaling.md).
    """

    def __init__(
        self,
        url_or_client: str | RespCommands,
        *,
        timeout_s: float = 0.1,
        admin_timeout_s: float = 5.0,
        prefix: str = "sy:",
        settled_ttl_s: float = 3600.0,
        ledger_ttl_s: int = _LEDGER_TTL_S,
        lease_expiry_s: float = LEASE_EXPIRY_S,
        clock: Callable[[], float] = time.time,
        num_connections: int = 2,
    ) -> None:
        self.timeout_s = timeout_s
        self.lease_expiry_s = lease_expiry_s
        self.admin_timeout_s = admin_timeout_s
        self.keys = KeySpace(prefix)
        self.layouts = KeyLayouts(self.keys)
        """The KEYS of each admit and settle, per tenant, month and rule set."""
        self._settled_ttl_s = math.ceil(settled_ttl_s)
        self.ledger_ttl_s = ledger_ttl_s
        self._admit = LuaScript("admit.lua")
        self._settle = LuaScript("settle.lua")
        self._flush = LuaScript("flush.lua")
        self._fast: Connection | None = None
        self._clock = clock
        self._leases = LeaseBook(lease_expiry_s)
        """Leases of the requests admitted through ``admit`` (CreditStore keeps its own)."""
        self._writes = WriteBack(self)
        """Lease renewals, and releases of admits that failed, owed to Redis."""
        self._ticker: asyncio.Task[None] | None = None
        self._closed = False
        if isinstance(url_or_client, str):
            # the hot path (admit, settle, ping) on its own connections; usage on another, opened on
            # first use, so a long report never queues admits behind it. No retries: failover decides.
            self._fast = open_client(
                url_or_client, connect_timeout_s=timeout_s, num_connections=num_connections
            )
            self._client = RespCommands.from_url(url_or_client, connect_timeout_s=timeout_s)
            self._owns_client = True
        else:
            self._client = url_or_client
            self._owns_client = False
        self._scripts = ScriptRunner(self._client, self._fast, timeout_s=timeout_s)

    # ---- the Store protocol -----------------------------------------------------------------

    async def admit(self, admission: Admission) -> Decision:
        tenant = admission.tenant
        owed = self._writes.send_soon(tenant, self._clock())  # what is owed goes ahead, in the same write
        try:
            decision, _, _ = await self.admit_with_credit(admission, None)
        except StoreUnavailable:
            # it may still run when Redis resumes: release its leases after it, on the same connection
            for key in self.layouts.lease_keys(tenant, admission.month, admission.rules):
                self._writes.of(tenant).add_release(key, [admission.request_id])
            self._start_ticker()
            raise
        if decision.allowed and (keys := self.layouts.lease_keys(tenant, admission.month, admission.rules)):
            request_id = admission.request_id
            self._leases.hold(
                request_id,
                tenant,
                [(key, request_id, False) for key in keys],
                expiry_s=admission.now_s + self._leases.ttl_s(admission.lease_ttl_s),
                until_s=admission.now_s + admission.lease_ttl_s,
            )
            self._start_ticker()
        if owed is not None:
            await owed  # done before this request's next call (never raises: a failed write is kept)
        return decision

    async def admit_with_credit(
        self, admission: Admission, want: tuple[int, int, int] | None
    ) -> tuple[Decision, float | None, list[int]]:
        """``admit``, also taking credit when allowed (``want``: requests, tokens, lease slots per
        check; see ``CreditStore``). Returns the decision, the budget room left (``None`` without
        budgets) and the credit granted per check of ``layouts.admit``."""
        key_names, checks = self.layouts.admit(admission.tenant, admission.month, admission.rules)
        spec = admit_spec(admission, checks, lease_expiry_s=self.lease_expiry_s, want=want)
        reply = await self._scripts.run(self._admit, key_names, spec)
        return read_admit_reply(reply, admission)

    def flush_soon(self, keys: Sequence[str], spec: bytes) -> Awaitable[Any]:
        """One ``lua/flush.lua`` call (ledger increments, window adjustments, lease releases of one
        tenant), queued now: Redis runs it before any call made after this one, so a flush and the
        admit behind it share one write. Await the result; it is bounded by ``timeout_s``."""
        return self._scripts.run_soon(self._flush, keys, spec)

    async def settle(self, settlement: Settlement) -> None:
        """Raises StoreUnavailable when Redis did not answer; sending it again is safe (applied once)."""
        self._leases.release(settlement.request_id)
        tenant = settlement.tenant
        rule_keys, token_keys, lease_keys = self.layouts.settle(tenant, settlement.month, settlement.rules)
        key_names = [self.keys.settled(tenant, settlement.reserved_at_s), *rule_keys]
        spec = settle_spec(
            settlement,
            settled_ttl_s=self._settled_ttl_s,
            ledger_ttl_s=self.ledger_ttl_s,
            token_keys=token_keys,
            lease_keys=lease_keys,
        )
        await self._scripts.run(self._settle, key_names, spec)

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        try:
            async with asyncio.timeout(self.admin_timeout_s):
                if tenant is not None:
                    ledger_keys = [self.keys.usage(tenant, month)]
                else:
                    pattern = self.keys.usage_pattern(month)
                    ledger_keys = [_text(k) async for k in self._client.scan_iter(match=pattern, count=1000)]
                # in one loop turn: one write, answered as a pipeline
                hashes = await asyncio.gather(*(self._client.hgetall(key) for key in ledger_keys))
        except (RespError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"rate-limit store unavailable: {exc!r}") from exc
        tenants: dict[str, TenantUsage] = {}
        for key, fields in zip(ledger_keys, hashes, strict=True):
            if fields:
                decoded = {_text(k): _text(v) for k, v in fields.items()}
                tenants[self.keys.tenant_of_usage_key(key)] = tenant_usage_from_fields(decoded)
        return UsageReport(month=month, tenants=dict(sorted(tenants.items())))

    async def flush(self) -> None:
        """Write the lease renewals due and the releases owed (every settle is its own write)."""
        now = self._clock()
        self._writes.add_renewals(self._leases.renewals(now))
        await self._writes.flush(now)

    def _start_ticker(self) -> None:
        if (self._ticker is None or self._ticker.done()) and not self._closed:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        """While leases are held or writes owed: renew and write them, every second at most."""
        while len(self._leases) or self._writes.owed():
            await asyncio.sleep(min(1.0, self._leases.renew_every_s))
            try:
                await self.flush()
            except StoreUnavailable:
                pass  # kept: sent again at the next tick
            except Exception:  # a bug must not stop every later renewal
                logger.exception("renewing leases failed")

    async def ping(self) -> bool:
        try:
            async with Deadline(self.timeout_s):
                if self._fast is not None:
                    return bool(await self._fast.execute("PING"))
                return await self._client.ping()
        except (RespError, OSError, TimeoutError):
            return False

    async def close(self) -> None:
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._writes.owed():
            try:
                await self._writes.flush(self._clock())
            except StoreUnavailable as exc:
                logger.warning("closing with lease releases not written: %s", exc)
        if self._fast is not None:
            await self._fast.close()
        if self._owns_client:
            await self._client.close()
