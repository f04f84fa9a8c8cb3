"""The key admin API (admin keys only), as Litestar routes.

    POST   /v1/admin/keys                   create: {"tenant", "name"?, "pools"?, "models"?, "limits"?,
                                            "budget"?, "admin"?, "expires_at"?} -> the key, secret once
    GET    /v1/admin/keys[?tenant=]         list (policy-file keys too, marked "source": "policy")
    GET    /v1/admin/keys/{name}            show
    PATCH  /v1/admin/keys/{name}            change limits, budget, pools, models, admin, expires_at
    POST   /v1/admin/keys/{name}/rotate     {"grace_s"?: 3600} -> a new secret, once
    POST   /v1/admin/keys/{name}/revoke     (DELETE /v1/admin/keys/{name} does the same)
    GET    /v1/admin/audit[?limit=100]      who did what to which key, newest first

Every answer and error is JSON in OpenAI's shape; a store that cannot be reached is a 503.
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
_encode = msgspec.json.encode


def key_admin_routes(
    admin: KeyAdmin,
    authenticate: Authenticate[P],
    compiled: Callable[[], P],
    render: Callable[[GatewayError], Response[bytes]],
    decode: Decode,
) -> list[HTTPRouteHandler]:
    """The routes, bound to ``admin``; ``render`` turns an error into the response every route sends,
    ``decode`` reads a body. The compiled policy, the authentication and the decoding are passed in, not
    imported: ``gateway.compiled`` imports this package (``gateway.keys.hashing``), so the package
    imports nothing that leads back to it (``gateway.schemas`` imports ``gateway.pipeline``)."""

    async def run(
        request: Request[Any, Any, Any], act: Callable[[P, str], Awaitable[Any]]
    ) -> Response[bytes]:
        """Authenticate an admin key, then ``act(policy, actor)``; every failure in OpenAI's shape."""
        policy = compiled()
        try:
            key = await authenticate(policy, request)
            if key is None or not key.admin:
                raise PermissionDenied("Managing keys needs an admin key.", code="admin_key_required")
            result = await act(policy, key.key_id)
        except GatewayError as error:
            return render(error)
        except (TimeoutError, OSError) as exc:  # the key store (Redis) did not answer
            return render(
                ServiceUnavailable(
                    f"Key store unavailable: {type(exc).__name__}.",
                    code="store_unavailable",
                    headers={"Retry-After": "1"},
                )
            )
        return Response(content=_encode(result), media_type=MediaType.JSON)

    # one handler per path, so Litestar's OPTIONS (and a 405's Allow) name every method of the path
    @route("/v1/admin/keys", http_method=["GET", "POST"], status_code=200)
    async def keys(request: Request[Any, Any, Any]) -> Response[bytes]:
        if request.method == "POST":
            body = await request.body() or b"{}"  # no body: every field at its default
            return await run(request, lambda c, actor: admin.create(c.policy, actor, decode(body, KeySpec)))
        tenant = request.query_params.get("tenant")

        async def views(c: P, actor: str) -> dict[str, Any]:
            return {"object": "list", "data": await admin.views(c.policy, tenant)}

        return await run(request, views)

    @route("/v1/admin/keys/{name:str}", http_method=["GET", "PATCH", "DELETE"], status_code=200)
    async def key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        if request.method == "GET":
            return await run(request, lambda c, actor: admin.show(c.policy, name))
        if request.method == "DELETE":
            return await run(request, lambda c, actor: admin.revoke(c.policy, actor, name))
        body = await request.body() or b"{}"  # no body: every field at its default
        return await run(
            request,
            lambda c, actor: admin.update(c.policy, actor, name, decode(body, KeyChanges)),
        )

    @post("/v1/admin/keys/{name:str}/revoke", status_code=200)
    async def revoke_key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        return await run(request, lambda c, actor: admin.revoke(c.policy, actor, name))

    @post("/v1/admin/keys/{name:str}/rotate", status_code=200)
    async def rotate_key(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
        body = await request.body() or b"{}"  # no body: every field at its default

        async def act(c: P, actor: str) -> Any:
            return await admin.rotate(c.policy, actor, name, decode(body, RotateSpec).grace_s)

        return await run(request, act)

    @get("/v1/admin/audit")
    async def audit(request: Request[Any, Any, Any]) -> Response[bytes]:
        raw = request.query_params.get("limit", "100")

        async def act(c: P, actor: str) -> dict[str, Any]:
            if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
                raise InvalidRequest("limit: expected an integer from 1 to 10000.", param="limit")
            return {"object": "list", "data": await admin.audit(int(raw))}

        return await run(request, act)

    return [keys, key, revoke_key, rotate_key, audit]
