"""The key admin API (roles ``admin`` and, on its own tenant, ``tenant-admin``: ``gateway.roles``).

    POST   /v1/admin/keys                   create: {"tenant", "name"?, "pools"?, "models"?, "limits"?,
                                            "budget"?, "role"?, "expires_at"?} -> the key, secret once
    GET    /v1/admin/keys[?tenant=]         list (policy-file keys too, marked "source": "policy")
    GET    /v1/admin/keys/{name}            show
    PATCH  /v1/admin/keys/{name}            change limits (merged per field), budget, pools, models,
                                            role, expires_at; a revoked key: 409 key_revoked
    POST   /v1/admin/keys/{name}/rotate     {"grace_s"?: 3600} -> a new secret, once
    POST   /v1/admin/keys/{name}/revoke     (DELETE /v1/admin/keys/{name} does the same)
    GET    /v1/admin/audit[?limit=100]      who did what to which key, newest first

Every answer and error is JSON in OpenAI's shape; a store that cannot be reached is a 503. Each change
(made or refused) and each refused call is handed to ``record`` (the audit trail, ``gateway.audit``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import msgspec
from litestar import MediaType, Request, Response, get, post, route
from litestar.handlers import HTTPRouteHandler

from gateway.errors import GatewayError, InvalidRequest, PermissionDenied, ServiceUnavailable
from gateway.keys.admin import KeyAdmin
from gateway.keys.records import KeyChanges, KeySpec, RotateSpec
from gateway.policy import ApiKey, Policy
from gateway.policy.schema import Role
from gateway.roles import Principal, authorize, may_grant, scoped_tenant

__all__ = ["key_admin_routes"]

T = TypeVar("T")


class HoldsPolicy(Protocol):
    """What a route acts under: the compiled policy (``gateway.compiled.CompiledPolicy``)."""

    @property
    def policy(self) -> Policy: ...


class Decode(Protocol):
    """A small JSON body as ``kind``, or a 400 (``gateway.schemas.decode_as``)."""

    def __call__(self, body: bytes, kind: type[T], /) -> T: ...


P = TypeVar("P", bound=HoldsPolicy)
Authenticate = Callable[[P, Request[Any, Any, Any]], Awaitable[ApiKey | None]]
RecordCall = Callable[[Request[Any, Any, Any], ApiKey | None, str, str, dict[str, Any], int], Awaitable[Any]]
"""``(request, key or None, action, target, details, status)``: one admin call for the audit trail."""
_encode = msgspec.json.encode


def key_admin_routes(
    admin: KeyAdmin,
    authenticate: Authenticate[P],
    compiled: Callable[[], P],
    render: Callable[[GatewayError], Response[bytes]],
    decode: Decode,
    record: RecordCall | None = None,
) -> list[HTTPRouteHandler]:
    """The routes, bound to ``admin``; ``render`` turns an error into the response every route sends,
    ``decode`` reads a body. The compiled policy, the authentication and the decoding are passed in, not
    imported: ``gateway.compiled`` imports this package (``gateway.keys.hashing``), so the package
    imports nothing that leads back to it (``gateway.schemas`` imports ``gateway.pipeline``)."""

    async def run(
        request: Request[Any, Any, Any],
        act: Callable[[P, Principal], Awaitable[Any]],
        need: str,
        action: str | None = None,
        target: str = "",
        details: dict[str, Any] | None = None,
    ) -> Response[bytes]:
        """Authenticate a key whose role may do ``need`` (on some tenant: ``act`` checks which), then
        ``act(policy, principal)``; every failure in OpenAI's shape. A change (``action``) is
        recorded however it ends, a read only when it is refused 401/403."""
        policy = compiled()
        key: ApiKey | None = None
        try:
            key = await authenticate(policy, request)
            principal = Principal.of_key(key) if key is not None else None
            authorize(principal, need, scoped_tenant(principal, None))
            assert principal is not None  # authorize refuses None
            result = await act(policy, principal)
            response = Response(content=_encode(result), media_type=MediaType.JSON)
            target = getattr(result, "name", None) or target  # a created key's name, when made up
        except GatewayError as error:
            response = render(error)
        except (TimeoutError, OSError) as exc:  # the key store (Redis) did not answer
            response = render(
                ServiceUnavailable(
                    f"Key store unavailable: {type(exc).__name__}.",
                    code="store_unavailable",
                    headers={"Retry-After": "1"},
                )
            )
        status = response.status_code or 200  # None: the route's own (200)
        if record is not None and (action is not None or status in (401, 403)):
            path = request.url.path
            await record(request, key, action or "admin.read", target or path, details or {}, status)
        return response

    # one handler per path, so Litestar's OPTIONS (and a 405's Allow) name every method of the path
    @route("/v1/admin/keys", http_method=["GET", "POST"], status_code=200)
    async def keys(request: Request[Any, Any, Any]) -> Response[bytes]:
        if request.method == "POST":
            body = await request.body() or b"{}"  # no body: every field at its default
            details: dict[str, Any] = {}

            async def create(c: P, who: Principal) -> Any:
                spec = decode(body, KeySpec)
                details.update((k, v) for k, v in msgspec.to_builtins(spec).items() if v not in (None, []))
                authorize(who, "keys.write", spec.tenant)
                may_grant(who, spec.effective_role)
                return await admin.create(c.policy, who.name, spec)

            return await run(request, create, "keys.write", "key.create", details=details)
        asked = request.query_params.get("tenant")

        async def views(c: P, who: Principal) -> dict[str, Any]:
            tenant = scoped_tenant(who, asked)
            authorize(who, "keys.read", tenant)
            return {"object": "list", "data": await admin.views(c.policy, tenant)}

        return await run(request, views, "keys.read")

    async def owned(c: P, who: Principal, name: str, doing: str | None = None) -> None:
        """Refuse (403) a key of another tenant, or, when ``doing`` a change to it ("Revoking", ...),
        one whose role ``who`` may not give."""
        view = await admin.show(c.policy, name)
        authorize(who, "keys.read" if doing is None else "keys.write", view.tenant)
        if doing is not None:
            _may_act_on(who, view.role, doing)

    @route("/v1/admin/keys/{name:str}", http_method=["GET", "PATCH", "DELETE"], status_code=200)
    async def key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        if request.method == "GET":

            async def show(c: P, who: Principal) -> Any:
                await owned(c, who, name)
                return await admin.show(c.policy, name)

            return await run(request, show, "keys.read")
        if request.method == "DELETE":
            return await run(request, revoker(name), "keys.write", "key.revoke", name)
        body = await request.body() or b"{}"  # no body: every field at its default
        details: dict[str, Any] = {}

        async def update(c: P, who: Principal) -> Any:
            changes = decode(body, KeyChanges)
            details.update(msgspec.to_builtins(changes.given()))
            await owned(c, who, name, "Changing")
            may_grant(who, changes.effective_role)
            return await admin.update(c.policy, who.name, name, changes)

        return await run(request, update, "keys.write", "key.update", name, details)

    def revoker(name: str) -> Callable[[P, Principal], Awaitable[Any]]:
        async def revoke(c: P, who: Principal) -> Any:
            await owned(c, who, name, "Revoking")
            return await admin.revoke(c.policy, who.name, name)

        return revoke

    @post("/v1/admin/keys/{name:str}/revoke", status_code=200)
    async def revoke_key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        return await run(request, revoker(name), "keys.write", "key.revoke", name)

    @post("/v1/admin/keys/{name:str}/rotate", status_code=200)
    async def rotate_key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        body = await request.body() or b"{}"  # no body: every field at its default
        details: dict[str, Any] = {}

        async def act(c: P, who: Principal) -> Any:
            details["grace_s"] = grace_s = decode(body, RotateSpec).grace_s
            await owned(c, who, name, "Rotating")
            return await admin.rotate(c.policy, who.name, name, grace_s)

        return await run(request, act, "keys.write", "key.rotate", name, details)

    @get("/v1/admin/audit")
    async def audit(request: Request[Any, Any, Any]) -> Response[bytes]:
        raw = request.query_params.get("limit", "100")

        async def act(c: P, who: Principal) -> dict[str, Any]:
            if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
                raise InvalidRequest("limit: expected an integer from 1 to 10000.", param="limit")
            return {"object": "list", "data": await admin.audit(int(raw))}

        return await run(request, act, "audit.read")

    return [keys, key, revoke_key, rotate_key, audit]


def _may_act_on(who: Principal, role: Role | None, doing: str) -> None:
    """``may_grant``'s rule (a role ``who`` may not give is one it may not touch) for a key that already
    has ``role``; the message names what was tried, ``doing`` ("Revoking"), since nothing is given."""
    try:
        may_grant(who, role)
    except PermissionDenied as refused:
        raise PermissionDenied(
            f"{doing} a key with the role {role} needs the role admin; this key has role {who.role}.",
            code=refused.code,
        ) from None
