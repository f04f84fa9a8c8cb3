"""Who a verified token or session is: a name, a tenant and one role, from the provider's groups.

A user in several mapped groups gets the most powerful of their roles; a user in none is refused
(403): signing in at the provider is not by itself a right to administer the gateway.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gateway.errors import PermissionDenied
from gateway.policy import ApiKey
from gateway.policy.schema import NAME_PATTERN
from gateway.policy.sso import SsoConfig
from gateway.roles import Principal

RANK = ("viewer", "tenant-admin", "operator", "admin")
"""Roles from least to most powerful."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")
_TENANT = re.compile(NAME_PATTERN)
"""A tenant as the policy names one."""


def groups_of(config: SsoConfig, claims: dict[str, Any]) -> list[str]:
    """The user's groups from ``groups_claim`` (a list of strings, or one string)."""
    raw = claims.get(config.groups_claim)
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        return [g for g in raw if isinstance(g, str)]
    return []


def principal_from_claims(config: SsoConfig, claims: dict[str, Any]) -> Principal:
    """The principal of verified ``claims``; PermissionDenied when no group maps to a role."""
    roles = [config.role_mapping[g] for g in groups_of(config, claims) if g in config.role_mapping]
    if not roles:
        raise PermissionDenied(
            "No role for this user: none of its groups is in the policy's sso.role_mapping.",
            code="no_role",
        )
    role = max(roles, key=RANK.index)
    tenant = claims.get(config.tenant_claim) if config.tenant_claim else None
    if not (isinstance(tenant, str) and _TENANT.fullmatch(tenant)):
        if role == "tenant-admin":  # else it would act on a made-up tenant, shared by every such user
            raise PermissionDenied(
                f"A tenant-admin needs a tenant: the token's {config.tenant_claim or 'tenant'!r} claim is "
                "missing or not a tenant name.",
                code="no_tenant",
            )
        tenant = None
    name = claims.get("preferred_username") or claims.get("email") or claims.get("sub") or "unknown"
    return Principal(name=f"sso:{name}", tenant=tenant, role=role)


def as_api_key(principal: Principal) -> ApiKey:
    """The principal as the key the admin routes take (``gateway.roles.Principal.of_key`` gives the
    principal back, role and tenant included); the hash is of the name, so audit entries name the
    same user across calls. It holds no secret: it is never looked up, only handed on."""
    safe = _UNSAFE.sub("_", principal.name)
    return ApiKey(
        sha256=hashlib.sha256(principal.name.encode()).hexdigest(),
        tenant=principal.tenant or "sso",  # a tenant name (principal_from_claims); "sso" for roles above it
        name=safe[:128],
        role=principal.role,
    )
