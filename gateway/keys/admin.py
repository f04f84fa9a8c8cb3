"""KeyAdmin: what an admin may do to keys at run time, each action written with its audit entry.

Create (the secret is returned once; only its hash is stored), change limits, budget, allowlists,
admin flag and expiry, revoke, and rotate (a new secret; the old ones keep working for the grace
period). Keys declared in the policy file are listed but never changed here: the file owns them.
Every write names the revision it read, so two admins acting at once get a 409, not a lost update.
"""

from __future__ import annotations

import secrets

import msgspec

from gateway.errors import Conflict, InvalidRequest, NotFound
from gateway.keys.hashing import hash_key, new_key
from gateway.keys.records import AuditEntry, KeyChanges, KeyRecord, KeySpec, KeyView, Secret
from gateway.keys.registry import KeyRegistry
from gateway.keys.store import WriteConflict
from gateway.policy import Policy

__all__ = ["KeyAdmin"]

DEFAULT_GRACE_S = 3600.0


class KeyAdmin:
    """The admin API's actions on the registry's store; ``actor`` is the admin key's name."""

    def __init__(self, registry: KeyRegistry) -> None:
        self.registry = registry
        self.store = registry.store

    async def views(self, policy: Policy, tenant: str | None = None) -> list[KeyView]:
        await self.registry.refresh()
        now = self.registry.clock()
        views = [KeyView.of_policy_key(key) for key in policy.keys]
        views += [KeyView.of_record(r, now) for r in self.registry.records.values()]
        return [v for v in views if tenant is None or v.tenant == tenant]

    async def show(self, policy: Policy, name: str) -> KeyView:
        for key in policy.keys:
            if key.key_id == name:
                return KeyView.of_policy_key(key)
        return KeyView.of_record(await self._record(policy, name), self.registry.clock())

    async def create(self, policy: Policy, actor: str, spec: KeySpec) -> KeyView:
        _check_scope(policy, spec.pools, spec.models)
        _check_guardrails(policy, spec.guardrails)
        name = spec.name or f"key-{secrets.token_hex(4)}"
        if any(key.key_id == name for key in policy.keys):
            raise Conflict(f"A key named {name!r} is declared in the policy file.", param="name")
        key, now = new_key(), self.registry.clock()
        record = KeyRecord(
            name=name,
            tenant=spec.tenant,
            secrets=(Secret(hash_key(key)),),
            created_at=now,
            created_by=actor,
            pools=spec.pools,
            models=spec.models,
            limits=spec.limits,
            budget=spec.budget,
            admin=spec.admin,
            role=spec.role,
            expires_at=spec.expires_at,
            guardrails=spec.guardrails,
        )
        try:
            await self._put(record, 0, AuditEntry(now, actor, "create", name, spec.tenant))
        except WriteConflict:
            raise Conflict(f"A key named {name!r} already exists.", param="name") from None
        return KeyView.of_record(record, now, key=key)

    async def update(self, policy: Policy, actor: str, name: str, changes: KeyChanges) -> KeyView:
        """Apply ``changes`` (``limits`` merged per field); a revoked key is refused (409): it opens
        nothing again, so a change to it would only be recorded as if it mattered."""
        record = await self._record(policy, name)
        if record.revoked_at is not None:
            raise Conflict(
                f"Key {name!r} is revoked and can no longer be changed; make a new key.", code="key_revoked"
            )
        given = changes.given()
        _check_scope(policy, given.get("pools", ()), given.get("models", ()))  # type: ignore[arg-type]
        _check_guardrails(policy, given.get("guardrails", ()))  # type: ignore[arg-type]
        try:
            admin, role = changes.role_of(record)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="role") from None
        changed = msgspec.to_builtins(given)
        if {"admin", "role"} & given.keys():
            given = {**given, "admin": admin, "role": role}
        if "limits" in given:
            given = {**given, "limits": changes.limits_of(record)}
        new = msgspec.structs.replace(record, revision=record.revision + 1, **given)
        now = self.registry.clock()
        await self._put(new, record.revision, AuditEntry(now, actor, "update", name, record.tenant, changed))
        return KeyView.of_record(new, now)

    async def revoke(self, policy: Policy, actor: str, name: str) -> KeyView:
        record = await self._record(policy, name)
        now = self.registry.clock()
        if record.revoked_at is not None:
            return KeyView.of_record(record, now)  # revoking twice changes nothing
        new = msgspec.structs.replace(record, revision=record.revision + 1, revoked_at=now)
        await self._put(new, record.revision, AuditEntry(now, actor, "revoke", name, record.tenant))
        return KeyView.of_record(new, now)

    async def rotate(self, policy: Policy, actor: str, name: str, grace_s: float) -> KeyView:
        """A new secret; every older one stops working ``grace_s`` from now (0: at once)."""
        record = await self._record(policy, name)
        now = self.registry.clock()
        if record.status(now) != "active":
            raise Conflict(f"Key {name!r} is {record.status(now)}; only an active key rotates.")
        ends = now + grace_s
        kept = tuple(
            Secret(s.sha256, ends if s.expires_at is None else min(s.expires_at, ends))
            for s in record.secrets
            if (s.expires_at is None or s.expires_at > now) and grace_s > 0
        )
        key = new_key()
        new = msgspec.structs.replace(
            record, revision=record.revision + 1, secrets=(*kept, Secret(hash_key(key)))
        )
        audit = AuditEntry(now, actor, "rotate", name, record.tenant, {"grace_s": grace_s})
        await self._put(new, record.revision, audit)
        return KeyView.of_record(new, now, key=key)

    async def audit(self, limit: int) -> list[AuditEntry]:
        return await self.store.audit(limit)

    async def _record(self, policy: Policy, name: str) -> KeyRecord:
        if any(key.key_id == name for key in policy.keys):
            raise Conflict(
                f"Key {name!r} is declared in the policy file; change it there.", code="key_in_policy"
            )
        await self.registry.refresh()  # act on the newest revision, not the last poll's
        record = self.registry.records.get(name)
        if record is None:
            raise NotFound(f"No key named {name!r}.", code="key_not_found")
        return record

    async def _put(self, record: KeyRecord, read_revision: int, audit: AuditEntry) -> None:
        try:
            await self.store.put(record, read_revision=read_revision, audit=audit)
        except WriteConflict:
            if read_revision == 0:
                raise
            raise Conflict(f"Key {record.name!r} changed meanwhile; read it again and retry.") from None
        await self.registry.refresh()  # this replica serves the change at once


def _check_scope(policy: Policy, pools: tuple[str, ...], models: tuple[str, ...]) -> None:
    for pool in pools:
        if pool not in policy.pools:
            raise InvalidRequest(f"Unknown pool {pool!r}.", param="pools", code="unknown_pool")
    for model in models:
        if policy.pool_for_model(model) is None:
            raise InvalidRequest(f"Unknown model {model!r}.", param="models", code="unknown_model")


def _check_guardrails(policy: Policy, names: tuple[str, ...]) -> None:
    for name in names:
        if name not in policy.guardrails:
            raise InvalidRequest(
                f"Unknown guardrail set {name!r}.", param="guardrails", code="unknown_guardrail"
            )
