"""RedisStore: limits, leases and the ledger in Redis, shared by every gateway replica.

One EVALSHA per admit and one per settle (``lua/admit.lua``, ``lua/settle.lua``, shipped as package
files); concurrent calls with the same keys share one EVALSHA (see ``_eval``). Each call declares
only the keys its rules limit and passes the rest as one JSON argument (``cjson`` in the script):
packing ~30 separate arguments cost more client CPU than the script itself.
Scripts are called by their SHA1, computed locally, so the first call needs no SCRIPT LOAD; on
NOSCRIPT (a restarted or flushed Redis) the script is loaded and the call repeated. Every call is
bounded by ``timeout_s`` end to end; any failure to answer becomes ``StoreUnavailable`` at once
(no retries of the call here: the failover wrapper decides what happens next).

Leases are written to expire ``lease_expiry_s`` ahead and renewed while their request runs
(``leases.py``). A call that timed out may still run when a stalled Redis resumes: the leases of an
admit that failed so are released by a later write on the same connection (so after it), and a
settle is applied once per request id however often it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

import msgspec

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.resp import RespClient, RespError
from gateway.stores.base import (
    WINDOW_S,
    Admission,
    Decision,
    LimitRule,
    Settlement,
    StoreUnavailable,
    TenantUsage,
    UsageReport,
    seconds_to_next_month,
    tenant_usage_from_fields,
)
from gateway.stores.key_names import KeySpace
from gateway.stores.leases import LEASE_EXPIRY_S, LeaseBook
from gateway.stores.writeback import WriteBack

logger = logging.getLogger("switchyard.stores")

_REASONS = {1: "requests", 2: "tokens", 3: "concurrency", 4: "budget"}
_LEDGER_TTL_S = 400 * 86400  # 13 months and a bit


class _Script:
    """A Lua file of this package, called by SHA1."""

    def __init__(self, name: str) -> None:
        self.source = resources.files("gateway.stores").joinpath("lua", name).read_text(encoding="utf-8")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()


_json = msgspec.json.Encoder().encode


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_MAX_LAYOUTS = 4096


def _fail(batch: list[tuple[bytes, asyncio.Future[list[Any]]]], failure: StoreUnavailable) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(failure)
            future.exception()  # its caller may be gone (cancelled): mark it retrieved


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value``; a cache grown past its bound starts afresh (tenants x months x rule sets)."""
    if len(cache) >= _MAX_LAYOUTS:
        cache.clear()
    cache[key] = value


def _none_if_negative(value: int) -> int | None:
    return None if value < 0 else int(value)


def _seconds(ms: int) -> float | None:
    return None if ms < 0 else ms / 1000.0


class RedisStore:
    """The Store protocol on Redis (standalone, or Cluster thanks to the per-tenant hash tag).

    Args:
        url_or_client: a ``redis://`` URL, or a ``RespCommands`` connection the caller owns (then
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
    ) -> None:
        self.timeout_s = timeout_s
        self.lease_expiry_s = lease_expiry_s
        self.admin_timeout_s = admin_timeout_s
        self.keys = KeySpace(prefix)
        self._settled_ttl_s = math.ceil(settled_ttl_s)
        self.ledger_ttl_s = ledger_ttl_s
        self._admit_layouts: dict[tuple[str, str, tuple[LimitRule, ...]], Any] = {}
        self._settle_layouts: dict[tuple[str, str, tuple[LimitRule, ...]], Any] = {}
        self._admit = _Script("admit.lua")
        self._settle = _Script("settle.lua")
        self._flush = _Script("flush.lua")
        self._fast: RespClient | None = None
        self._batches: dict[tuple[str, tuple[str, ...]], list[tuple[bytes, asyncio.Future[list[Any]]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._clock = clock
        self._leases = LeaseBook(lease_expiry_s)
        """Leases of the requests admitted through ``admit`` (CreditStore keeps its own)."""
        self._writes = WriteBack(self)
        """Lease renewals, and releases of admits that failed, owed to Redis."""
        self._ticker: asyncio.Task[None] | None = None
        self._closed = False
        if isinstance(url_or_client, str):
            # the hot path (admit, settle, ping) on one connection; usage on a second, opened on first
            # use, so a long report never queues admits behind it. No retries: failover decides.
            self._fast = RespClient(url_or_client, connect_timeout_s=timeout_s)
            self._client = RespCommands.from_url(url_or_client, connect_timeout_s=timeout_s)
            self._owns_client = True
        else:
            self._client = url_or_client
            self._owns_client = False

    # ---- the Store protocol -----------------------------------------------------------------

    async def admit(self, admission: Admission) -> Decision:
        tenant = admission.tenant
        owed = self._writes.send_soon(tenant, self._clock())  # what is owed goes ahead, in the same write
        try:
            decision, _, _ = await self.admit_with_credit(admission, None)
        except StoreUnavailable:
            # it may still run when Redis resumes: release its leases after it, on the same connection
            for key in self._lease_keys(admission):
                self._writes.of(tenant).add_release(key, [admission.request_id])
            self._start_ticker()
            raise
        if decision.allowed and (keys := self._lease_keys(admission)):
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

    def _lease_keys(self, admission: Admission) -> list[str]:
        key_names, checks = self.admit_layout(admission.tenant, admission.month, admission.rules)
        return [key_names[key_no - 1] for kind, _, key_no, _ in checks if kind == 3]

    async def admit_with_credit(
        self, admission: Admission, want: tuple[int, int, int] | None
    ) -> tuple[Decision, float | None, list[int]]:
        """``admit``, also taking credit when allowed (``want``: requests, tokens, lease slots per
        check; see ``CreditStore``). Returns the decision, the budget room left (``None`` without
        budgets) and the credit granted per check of ``admit_layout``."""
        key_names, checks = self.admit_layout(admission.tenant, admission.month, admission.rules)
        spec = {
            "now": admission.now_s,
            "lease_ttl": min(admission.lease_ttl_s, self.lease_expiry_s),  # renewed while it runs
            "reserve": admission.reserve_tokens,
            "id": admission.request_id,
            "window": WINDOW_S,
            "to_next_month": seconds_to_next_month(admission.month, admission.now_s),
            "checks": checks,
            "budgets": [(b.scope, float(b.monthly_usd)) for b in admission.budgets],
        }
        if want is not None:
            spec["want"] = want
        reply = await self._eval(self._admit, key_names, _json(spec))
        allowed, reason, index, retry_ms, exceeds = (int(v) for v in reply[:5])
        lim_r, rem_r, reset_r, lim_t, rem_t, reset_t = (int(v) for v in reply[5:11])
        scope = None
        if not allowed:
            scopes = admission.budgets if reason == 4 else admission.rules
            scope = scopes[index - 1].scope
        decision = Decision(
            allowed=bool(allowed),
            reason=_REASONS.get(reason),
            scope=scope,
            retry_after_s=retry_ms / 1000.0,
            limit_requests=_none_if_negative(lim_r),
            remaining_requests=_none_if_negative(rem_r),
            reset_requests_s=_seconds(reset_r),
            limit_tokens=_none_if_negative(lim_t),
            remaining_tokens=_none_if_negative(rem_t),
            reset_tokens_s=_seconds(reset_t),
            exceeds_limit=bool(exceeds),
        )
        room = float(_text(reply[11])) if admission.budgets else None
        return decision, room, [int(v) for v in reply[12:]]

    def flush_soon(self, keys: Sequence[str], spec: bytes) -> Awaitable[Any]:
        """One ``lua/flush.lua`` call (ledger increments, window adjustments, lease releases of one
        tenant), queued now: Redis runs it before any call made after this one, so a flush and the
        admit behind it share one write. Await the result; it is bounded by ``timeout_s``."""
        if self._fast is not None:
            return self._enqueue(self._flush, keys, spec)
        return asyncio.ensure_future(self._eval(self._flush, keys, spec))

    async def settle(self, settlement: Settlement) -> None:
        """Raises StoreUnavailable when Redis did not answer; sending it again is safe (applied once)."""
        self._leases.release(settlement.request_id)
        tenant = settlement.tenant
        rule_keys, token_keys, lease_keys = self._settle_layout(tenant, settlement.month, settlement.rules)
        key_names = [self.keys.settled(tenant, settlement.reserved_at_s), *rule_keys]
        scopes = ["tenant"]
        if settlement.key_id:
            scopes.append(f"key:{settlement.key_id}")
        if settlement.pool:
            scopes.append(f"pool:{settlement.pool}")
        spec = {
            "id": settlement.request_id,
            "marker_ttl": self._settled_ttl_s,
            "bucket": math.floor(settlement.reserved_at_s),
            "delta": settlement.input_tokens + settlement.output_tokens - settlement.reserved_tokens,
            "oldest_live": -1 if settlement.now_s is None else math.floor(settlement.now_s) - WINDOW_S,
            "input": settlement.input_tokens,
            "output": settlement.output_tokens,
            "cost": repr(float(settlement.cost_usd)),  # a string: HINCRBYFLOAT gets every digit
            "ledger_ttl": self.ledger_ttl_s,
            "scopes": scopes,
            "tokens": token_keys,
            "leases": lease_keys,
        }
        await self._eval(self._settle, key_names, _json(spec))

    # ---- key layouts, built once per tenant, month and rule set ----------------------------------

    def admit_layout(
        self, tenant: str, month: str, rules: tuple[LimitRule, ...]
    ) -> tuple[list[str], list[tuple[int, int, int, int]]]:
        """KEYS of an admit (the ledger, then each limited window or lease set) and its checks:
        (kind, rule number, key number, limit)."""
        cache_key = (tenant, month, rules)
        layout = self._admit_layouts.get(cache_key)
        if layout is None:
            keys = self.keys
            key_names = [keys.usage(tenant, month)]
            checks: list[tuple[int, int, int, int]] = []
            for rule_no, rule in enumerate(rules, start=1):
                for kind, limit, key in (
                    (1, rule.requests_per_minute, keys.requests),
                    (2, rule.tokens_per_minute, keys.tokens),
                    (3, rule.max_concurrent, keys.leases),
                ):
                    if limit is not None:
                        key_names.append(key(tenant, rule.scope))
                        checks.append((kind, rule_no, len(key_names), limit))
            layout = (key_names, checks)
            _remember(self._admit_layouts, cache_key, layout)
        return layout

    def _settle_layout(
        self, tenant: str, month: str, rules: tuple[LimitRule, ...]
    ) -> tuple[list[str], list[int], list[int]]:
        """KEYS of a settle after its settled-set key (the ledger, token windows, lease sets) and the
        KEYS numbers of the token windows and of the lease sets."""
        cache_key = (tenant, month, rules)
        layout = self._settle_layouts.get(cache_key)
        if layout is None:
            keys = self.keys
            key_names = [keys.usage(tenant, month)]
            token_keys, lease_keys = [], []
            for rule in rules:
                if rule.tokens_per_minute is not None:
                    key_names.append(keys.tokens(tenant, rule.scope))
                    token_keys.append(len(key_names) + 1)  # KEYS[1] is the settled set
                if rule.max_concurrent is not None:
                    key_names.append(keys.leases(tenant, rule.scope))
                    lease_keys.append(len(key_names) + 1)
            layout = (key_names, token_keys, lease_keys)
            _remember(self._settle_layouts, cache_key, layout)
        return layout

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
            async with asyncio.timeout(self.timeout_s):
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

    # ---- one bounded round trip ---------------------------------------------------------------

    async def _eval(self, script: _Script, keys: Sequence[str], spec: bytes) -> list[Any]:
        """One request's script reply, within ``timeout_s``.

        On the fast path, calls made in the same event-loop turn with the same keys (same tenant,
        same rules) share one EVALSHA: the script takes one ARGV entry per request and answers each
        in turn, atomically. At concurrency 16 that is a fraction of the commands, bytes and parsing.
        The batch holds the one timer of them all (a timer per call was a quarter of this client's
        CPU) and always resolves every caller's future: a reply, or StoreUnavailable.
        """
        if self._fast is not None:
            return await self._enqueue(script, keys, spec)  # the batch bounds the wait by timeout_s
        try:
            async with asyncio.timeout(self.timeout_s):
                reply = await self._client.evalsha(script.sha, script.source, keys, spec)  # loads on NOSCRIPT
        except (RespError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"rate-limit store unavailable: {exc!r}") from exc
        return list(reply[0]) if isinstance(reply[0], list) else [reply[0]]

    def _enqueue(self, script: _Script, keys: Sequence[str], spec: bytes) -> asyncio.Future[list[Any]]:
        """Queue one call into this loop turn's batch for its keys; the batch always settles the future."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        group = (script.sha, tuple(keys))
        batch = self._batches.get(group)
        if batch is None:
            batch = self._batches[group] = []
            loop.call_soon(self._send_batch, script, group)
        batch.append((spec, future))
        return future

    def _send_batch(self, script: _Script, group: tuple[str, tuple[str, ...]]) -> None:
        batch = self._batches.pop(group)
        task = asyncio.get_running_loop().create_task(self._run_batch(script, group[1], batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_batch(
        self, script: _Script, keys: tuple[str, ...], batch: list[tuple[bytes, asyncio.Future[list[Any]]]]
    ) -> None:
        assert self._fast is not None
        specs = [spec for spec, _ in batch]
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    replies = await self._fast.execute("EVALSHA", script.sha, len(keys), *keys, *specs)
                except RespError as error:
                    if not str(error).startswith("NOSCRIPT"):
                        raise
                    await self._fast.execute("SCRIPT", "LOAD", script.source)  # a fresh or flushed Redis
                    replies = await self._fast.execute("EVALSHA", script.sha, len(keys), *keys, *specs)
        except (RespError, OSError, TimeoutError) as exc:
            _fail(batch, StoreUnavailable(f"rate-limit store unavailable: {exc!r}"))
            return
        except BaseException as exc:  # cancelled (shutdown) or a bug: no caller may wait forever
            _fail(batch, StoreUnavailable(f"rate-limit store call failed: {exc!r}"))
            raise
        if not isinstance(replies, list) or len(replies) != len(batch):
            _fail(batch, StoreUnavailable(f"rate-limit store answered {replies!r} to {len(batch)} calls"))
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply if isinstance(reply, list) else [reply])
