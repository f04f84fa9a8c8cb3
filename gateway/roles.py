"""Who may do what on the admin API, the console and ``/v1/usage``: one table, one check.

A caller is a :class:`Principal` (a name, a tenant, a role): an API key makes one
(:meth:`Principal.of_key`), and so may any other sign-in (a token's group claim) before calling the
same :func:`authorize`. ``ACTIONS`` (action -> the roles allowed, and whether a ``tenant-admin`` is held
to its own tenant) and ``ROUTES`` ((method, path) -> action) are the only source of truth: the routes
read them, ``tests/gateway/test_roles.py`` walks every admin route of the app against them, and the
table in docs/security.md is :func:`markdown_table` of them (a test compares the two).
"""

from __future__ import annotations

import msgspec

from gateway.errors import AuthenticationFailed, PermissionDenied
from gateway.policy import ApiKey
from gateway.policy.schema import Role

__all__ = [
    "ACTIONS",
    "ROLES",
    "ROUTES",
    "Principal",
    "Rule",
    "action_of",
    "actions_of",
    "authorize",
    "markdown_table",
    "may_grant",
    "scoped_tenant",
]

ROLES: tuple[Role, ...] = ("admin", "operator", "viewer", "tenant-admin")


class Principal(msgspec.Struct, frozen=True):
    """Who is asking: ``role`` None is a plain API key (no admin access)."""

    name: str
    tenant: str | None = None
    role: Role | None = None

    @classmethod
    def of_key(cls, key: ApiKey) -> Principal:
        return cls(key.key_id, key.tenant, key.effective_role)


class Rule(msgspec.Struct, frozen=True):
    """The roles allowed an action; ``tenant_scoped``: a ``tenant-admin`` only on its own tenant."""

    roles: tuple[Role, ...]
    summary: str
    tenant_scoped: bool = False


_READERS: tuple[Role, ...] = ("admin", "operator", "viewer")
ACTIONS: dict[str, Rule] = {
    "usage.read": Rule((*_READERS, "tenant-admin"), "usage and spend per tenant, key and pool", True),
    "pools.read": Rule(_READERS, "pools and replicas: health, breakers, load, latency"),
    "policy.read": Rule(_READERS, "the serving policy (no hashes, no credentials)"),
    "route.explain": Rule(_READERS, "which pool a request would go to, and why"),
    "keys.read": Rule(("admin", "tenant-admin"), "list and show keys", True),
    "keys.write": Rule(("admin", "tenant-admin"), "create, update, rotate and revoke keys", True),
    "audit.read": Rule(("admin",), "the key audit trail"),
    "session.read": Rule(ROLES, "who the caller is: name, tenant, role and the actions it may do"),
    "policy.reload": Rule(("admin", "operator"), "re-read the answering process's policy files now"),
    "gateway.drain": Rule(
        ("admin", "operator"), "fail the answering gateway's readiness (every worker's), or undo that"
    ),
}
"""Every admin action."""

ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/v1/usage"): "usage.read",
    ("GET", "/v1/admin/pools"): "pools.read",
    ("GET", "/v1/admin/policy"): "policy.read",
    ("POST", "/v1/admin/route/explain"): "route.explain",
    ("GET", "/v1/admin/keys"): "keys.read",
    ("GET", "/v1/admin/keys/{name}"): "keys.read",
    ("POST", "/v1/admin/keys"): "keys.write",
    ("PATCH", "/v1/admin/keys/{name}"): "keys.write",
    ("DELETE", "/v1/admin/keys/{name}"): "keys.write",
    ("POST", "/v1/admin/keys/{name}/rotate"): "keys.write",
    ("POST", "/v1/admin/keys/{name}/revoke"): "keys.write",
    ("GET", "/v1/admin/audit"): "audit.read",
    ("GET", "/v1/admin/whoami"): "session.read",
    ("POST", "/v1/admin/policy/reload"): "policy.reload",
    ("POST", "/v1/admin/drain"): "gateway.drain",
    ("DELETE", "/v1/admin/drain"): "gateway.drain",
}
"""Every admin route (path as documented, parameters without their type) and its action."""

_GRANTS: dict[Role | None, tuple[Role, ...]] = {"admin": ROLES, "tenant-admin": ("tenant-admin",)}


def action_of(method: str, path: str) -> str:
    """The action of an admin route; KeyError for a route the table does not name."""
    return ROUTES[(method.upper(), path)]


def actions_of(role: Role | None) -> list[str]:
    """The actions ``role`` may do (some, for a ``tenant-admin``, on its own tenant only), sorted."""
    return sorted(action for action, rule in ACTIONS.items() if role in rule.roles)


def authorize(principal: Principal | None, action: str, tenant: str | None = None) -> None:
    """Return if ``principal`` may do ``action`` (on ``tenant``'s data, when the action is scoped
    and ``tenant`` is given); else raise 401 (no principal) or 403 (``insufficient_role``, or
    ``admin_key_required`` for a key without any role, as before roles)."""
    if principal is None:
        raise AuthenticationFailed(  # no key, or (auth not required) one the gateway does not know
            f"{action} needs a known API key with a role. Send it as `Authorization: Bearer <API key>`."
        )
    rule = ACTIONS[action]
    needed = _either(rule.roles)
    if principal.role not in rule.roles:
        code = "admin_key_required" if principal.role is None else "insufficient_role"
        had = f"role {principal.role}" if principal.role else "no role (a plain key, not an admin key)"
        raise PermissionDenied(f"{action} needs the role {needed}; this key has {had}.", code=code)
    if rule.tenant_scoped and principal.role == "tenant-admin" and tenant != principal.tenant:
        wider = _either(tuple(r for r in rule.roles if r != "tenant-admin"))
        raise PermissionDenied(
            f"{action} on tenant {tenant!r} needs the role {wider}; "
            f"a tenant-admin acts on its own tenant ({principal.tenant!r}) only.",
            code="insufficient_role",
        )


def _either(roles: tuple[str, ...]) -> str:
    return roles[0] if len(roles) == 1 else f"{', '.join(roles[:-1])} or {roles[-1]}"


def scoped_tenant(principal: Principal | None, tenant: str | None) -> str | None:
    """The tenant a scoped read covers: a ``tenant-admin``'s own when none is asked; else as asked."""
    if principal is not None and principal.role == "tenant-admin" and tenant is None:
        return principal.tenant
    return tenant


def may_grant(principal: Principal, role: Role | None) -> None:
    """Refuse (403) giving a key a role its maker may not hand out: a tenant-admin makes plain keys
    and tenant-admins, an admin any."""
    if role is not None and role not in _GRANTS.get(principal.role, ()):
        raise PermissionDenied(
            f"Giving a key the role {role} needs the role admin; this key has role {principal.role}.",
            code="insufficient_role",
        )


def markdown_table() -> str:
    """The table docs/security.md prints: one row per action, its routes and its roles."""
    lines = ["| action | routes | admin | operator | viewer | tenant-admin |", "|---|---|---|---|---|---|"]
    for action, rule in ACTIONS.items():
        routes = "<br>".join(f"`{m} {p}`" for (m, p), a in ROUTES.items() if a == action)
        cells = []
        for role in ROLES:
            allowed = role in rule.roles
            cells.append(
                ("own tenant" if role == "tenant-admin" and rule.tenant_scoped else "yes") if allowed else "-"
            )
        lines.append(f"| `{action}`: {rule.summary} | {routes} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
