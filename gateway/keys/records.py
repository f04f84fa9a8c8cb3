"""What the key store holds: one record per key made through the admin API, and the audit trail.

A record is found by its ``name`` (unique across the policy's keys and the API's) and holds the
SHA-256 of each secret that opens it, never a secret: a rotation adds a secret and gives the old one
an end (its grace period), so both work until then. Limits, budgets and usage are counted by the
name, so they carry across a rotation.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.policy import ApiKey, Budget, RateLimits
from gateway.policy.schema import KEY_NAME_PATTERN, Count, KeyName, Name, Role, Sha256Hex

__all__ = [
    "KEY_NAME_PATTERN",
    "AuditEntry",
    "KeyChanges",
    "KeyName",
    "KeyRecord",
    "KeySpec",
    "KeyView",
    "LimitChanges",
    "RotateSpec",
    "Secret",
]

Action = Literal["create", "update", "revoke", "rotate"]
Timestamp = Annotated[float, msgspec.Meta(ge=0)]


class Secret(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One secret that opens a key, by its hash."""

    sha256: Sha256Hex
    expires_at: float | None = None
    """Unix time after which this secret no longer works (set when it is rotated away)."""


class KeyRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A key made through the admin API, as stored (Redis hash field or the keys file)."""

    name: Name
    """``Name``, not ``KeyName``: a record stored before names lost ``/`` must still load."""
    tenant: Name
    secrets: tuple[Secret, ...]
    created_at: float
    created_by: str
    revision: int = 1
    """Bumped by every change; a write that read an older revision is refused (two admins at once)."""
    pools: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    limits: RateLimits | None = None
    budget: Budget | None = None
    admin: bool = False
    expires_at: float | None = None
    """Unix time after which the key no longer works; None: never."""
    role: Role | None = None
    """Its admin role (``gateway.roles``); ``admin: true`` means ``admin`` too."""
    revoked_at: float | None = None
    guardrails: tuple[str, ...] = ()
    """Guardrail sets (the policy's, by name) its requests go through, after its pool's."""

    def status(self, now: float) -> Literal["active", "revoked", "expired"]:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    @property
    def effective_role(self) -> Role | None:
        return self.role or ("admin" if self.admin else None)

    def opens(self, secret: Secret, now: float) -> bool:
        """Whether ``secret`` (one of this record's) lets a request in at ``now``."""
        return self.status(now) == "active" and (secret.expires_at is None or now < secret.expires_at)

    def api_key(self, secret: Secret) -> ApiKey:
        """The key as the rest of the gateway sees one from the policy (the same name for every
        secret, so limits and usage follow the key through a rotation)."""
        return ApiKey(
            sha256=secret.sha256,
            tenant=self.tenant,
            name=self.name,
            pools=self.pools,
            models=self.models,
            limits=self.limits,
            budget=self.budget,
            admin=self.admin,
            role=self.role,
            guardrails=self.guardrails,
        )


class KeySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/admin/keys``: a new key."""

    tenant: Name
    name: KeyName | None = None
    """Unique among all keys, no ``/`` (400 naming ``name``); default ``key-`` and 8 random hex digits."""
    pools: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    """Model names this key may use besides those of its pools (both empty: every model)."""
    limits: RateLimits | None = None
    budget: Budget | None = None
    admin: bool = False
    expires_at: Timestamp | None = None
    guardrails: tuple[str, ...] = ()
    """Guardrail sets (the policy's ``guardrails:``, by name) its requests go through."""
    role: Role | None = None
    """Its admin role; ``admin: true`` is the same as ``role: admin``, and refused with another."""

    def __post_init__(self) -> None:
        if self.admin and self.role not in (None, "admin"):
            raise ValueError(f"admin: true contradicts role: {self.role}; give only the role")

    @property
    def effective_role(self) -> Role | None:
        return self.role or ("admin" if self.admin else None)


class LimitChanges(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``limits`` in a PATCH, merged into the key's per field as a JSON merge patch (RFC 7396) does: a
    field given replaces, ``null`` removes it, one left out stays. So ``--tpm`` alone keeps the rpm."""

    requests_per_minute: Count | msgspec.UnsetType | None = msgspec.UNSET
    tokens_per_minute: Count | msgspec.UnsetType | None = msgspec.UNSET
    max_concurrent: Count | msgspec.UnsetType | None = msgspec.UNSET

    def merged(self, limits: RateLimits | None) -> RateLimits | None:
        """``limits`` with this change applied; None when no limit is left."""
        given = {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not msgspec.UNSET}
        merged = msgspec.structs.replace(limits or RateLimits(), **given)
        return None if merged == RateLimits() else merged


class KeyChanges(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``PATCH /v1/admin/keys/{name}``: the fields given replace the key's (``null`` clears), except
    ``limits``, merged per field (``LimitChanges``). ``budget`` has one field, so replacing it is merging."""

    pools: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    models: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    limits: LimitChanges | msgspec.UnsetType | None = msgspec.UNSET
    budget: Budget | msgspec.UnsetType | None = msgspec.UNSET
    admin: bool | msgspec.UnsetType = msgspec.UNSET
    expires_at: Timestamp | msgspec.UnsetType | None = msgspec.UNSET
    guardrails: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    role: Role | msgspec.UnsetType | None = msgspec.UNSET

    def given(self) -> dict[str, object]:
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not msgspec.UNSET}

    def limits_of(self, record: KeyRecord) -> RateLimits | None:
        """The key's limits after this change: ``null`` removes them all, an object merges."""
        if isinstance(self.limits, LimitChanges):
            return self.limits.merged(record.limits)
        return record.limits if self.limits is msgspec.UNSET else None

    def role_of(self, record: KeyRecord) -> tuple[bool, Role | None]:
        """``(admin, role)`` after this change: a role given alone replaces the admin flag, an admin
        flag given alone replaces an ``admin`` role; both given must agree (ValueError)."""
        if self.role is not msgspec.UNSET:
            admin = self.admin if isinstance(self.admin, bool) else False
            if admin and self.role not in (None, "admin"):
                raise ValueError(f"admin: true contradicts role: {self.role}; give only the role")
            return admin, self.role
        if isinstance(self.admin, bool):
            return self.admin, None if self.admin or record.role == "admin" else record.role
        return record.admin, record.role

    @property
    def effective_role(self) -> Role | None:
        """The role this change asks for (None: none, or not changed)."""
        role = None if self.role is msgspec.UNSET else self.role
        return role or ("admin" if self.admin is True else None)


class RotateSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/admin/keys/{name}/rotate``."""

    grace_s: Annotated[float, msgspec.Meta(ge=0)] = 3600.0
    """Seconds the old secrets keep working (0: they stop at once)."""


class KeyView(msgspec.Struct, frozen=True):
    """A key as the admin API shows it: never a secret, and the hash of each only by its first 12 digits."""

    name: str
    tenant: str
    source: Literal["api", "policy"]
    """``policy``: declared in the policy file, read-only here."""
    status: Literal["active", "revoked", "expired"]
    fingerprints: tuple[str, ...]
    """The first 12 hex digits of the SHA-256 of each secret that still opens the key."""
    pools: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    limits: RateLimits | None = None
    budget: Budget | None = None
    admin: bool = False
    role: Role | None = None
    created_at: float | None = None
    created_by: str | None = None
    expires_at: float | None = None
    revoked_at: float | None = None
    revision: int | None = None
    guardrails: tuple[str, ...] = ()
    key: str | None = None
    """The secret itself: only in the answer that made it (create, rotate), never again."""
    object: str = "sortyard.key"

    @classmethod
    def of_record(cls, record: KeyRecord, now: float, key: str | None = None) -> KeyView:
        live = tuple(s.sha256[:12] for s in record.secrets if s.expires_at is None or now < s.expires_at)
        return cls(
            name=record.name,
            tenant=record.tenant,
            source="api",
            status=record.status(now),
            fingerprints=live,
            pools=record.pools,
            models=record.models,
            limits=record.limits,
            budget=record.budget,
            admin=record.admin,
            role=record.effective_role,
            created_at=record.created_at,
            created_by=record.created_by,
            expires_at=record.expires_at,
            revoked_at=record.revoked_at,
            revision=record.revision,
            guardrails=record.guardrails,
            key=key,
        )

    @classmethod
    def of_policy_key(cls, key: ApiKey) -> KeyView:
        return cls(
            name=key.key_id,
            tenant=key.tenant,
            source="policy",
            status="active",
            fingerprints=(key.sha256[:12],),
            pools=key.pools,
            models=key.models,
            limits=key.limits,
            budget=key.budget,
            admin=key.admin,
            role=key.effective_role,
            guardrails=key.guardrails,
        )


class AuditEntry(msgspec.Struct, frozen=True):
    """One admin action: who (the admin key's name), what, to which key, when. Never a secret."""

    at: float
    actor: str
    action: Action
    key: str
    tenant: str
    changes: dict[str, Any] = msgspec.field(default_factory=dict)
    """For ``update``: the fields set; for ``rotate``: the old secret's grace in seconds."""
    object: str = "sortyard.audit_entry"
