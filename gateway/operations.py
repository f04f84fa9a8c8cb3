"""Admin operations on the process that answers (Litestar routes): who is calling, reload, drain.

    GET    /v1/admin/whoami          the caller: name, tenant, role, and the actions its role may do
    POST   /v1/admin/policy/reload   re-read this process's policy files now (422 ``policy_invalid``:
                                     refused, the last good policy keeps serving)
    POST   /v1/admin/drain           fail readiness from now on, still serving what comes
    DELETE /v1/admin/drain           ready again after an admin drain (409 ``shutting_down`` when
                                     SIGTERM or Ctrl-C began or followed it)

A reload acts on the one process that answers: with several workers or replicas a changed policy file
still reaches every process by its own polling (``gateway.reloader``). A drain acts on the gateway
instance that answers, all its workers (``gateway.drain_mark``), and on no other replica, which is
what a Kubernetes preStop hook or a rolling update wants. A reload and a drain are on the
audit trail with the caller as actor (a reload's one entry is ``PolicyReloadAudit``'s, named through
``acting_as``); a refused call (401, 403) is handed to ``record`` like every admin route's; a served
``whoami`` is a read, not recorded. ``OPERATION_PATHS`` and ``OPERATION_STRUCTS`` are these routes'
part of the OpenAPI document (``gateway.openapi`` merges them).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, post, route
from litestar.handlers import HTTPRouteHandler

from gateway.audit.policy_diff import PolicyReloadAudit, policy_diff
from gateway.compiled import CompiledPolicy
from gateway.errors import Conflict, GatewayError, InvalidRequest
from gateway.instance import Gateway
from gateway.policy import ApiKey
from gateway.roles import Principal, actions_of, authorize

__all__ = ["OPERATION_PATHS", "OPERATION_STRUCTS", "PolicyInvalid", "operation_routes"]

Authenticate = Callable[[CompiledPolicy, Request[Any, Any, Any]], Awaitable[ApiKey | None]]
RecordCall = Callable[[Request[Any, Any, Any], ApiKey | None, str, str, dict[str, Any], int], Awaitable[Any]]
_encode = msgspec.json.encode
_DRAIN = "/v1/admin/drain"


class PolicyInvalid(InvalidRequest):
    """A reload asked for through the admin API whose files do not validate or compile."""

    status = 422
    default_code = "policy_invalid"


class WhoAmI(msgspec.Struct):
    name: str
    tenant: str | None
    role: str | None
    actions: list[str]
    """The actions this role may do, sorted (a tenant-admin's scoped ones on its own tenant only)."""


class PoolChanges(msgspec.Struct):
    added: list[str]
    removed: list[str]
    changed: list[str]


class PolicyChanges(msgspec.Struct):
    """What a reload changed, by name only (``gateway.audit.policy_diff``)."""

    sections: list[str]
    pools: PoolChanges


class ReloadResult(msgspec.Struct):
    adopted: bool
    changed: PolicyChanges
    loaded_at: float
    process: str


class DrainState(msgspec.Struct):
    draining: bool
    in_flight: int
    """Proxied requests this process has not finished (their after-response work included)."""
    process: str


def operation_routes(
    gateway: Gateway,
    authenticate: Authenticate,
    render: Callable[[GatewayError], Response[bytes]],
    record: RecordCall,
    client_of: Callable[[Request[Any, Any, Any]], str],
    reload_audit: PolicyReloadAudit | None = None,
) -> list[HTTPRouteHandler]:
    """The routes, bound to ``gateway``; ``render`` turns an error into the response every route sends,
    ``record`` writes an admin call on the audit trail, ``client_of`` names a request's client the way
    the limits count it; ``reload_audit`` (the reloader's listener) names the caller on a reload's entry."""
    process = reload_audit.process if reload_audit is not None else f"{socket.gethostname()}:{os.getpid()}"

    async def caller(
        request: Request[Any, Any, Any], action: str, audited: str, target: str
    ) -> ApiKey | Response[bytes]:
        """The key (or signed-in user) whose role may do ``action``, else the refusal; a 401 or 403 is
        recorded as ``audited`` on ``target``."""
        key: ApiKey | None = None
        try:
            key = await authenticate(gateway.compiled, request)
            authorize(Principal.of_key(key) if key is not None else None, action)
        except GatewayError as error:
            response = render(error)
            if response.status_code in (401, 403):
                await record(request, key, audited, target, {}, response.status_code)
            return response
        assert key is not None  # authorize refuses a missing one (401)
        return key

    def drain_state() -> Response[bytes]:
        state = DrainState(gateway.is_draining, gateway.inflight.num_open, process)
        return Response(content=_encode(state), media_type=MediaType.JSON)

    @get("/v1/admin/whoami")
    async def whoami(request: Request[Any, Any, Any]) -> Response[bytes]:
        key = await caller(request, "session.read", "admin.read", request.url.path)
        if isinstance(key, Response):
            return key
        role = key.effective_role
        answer = WhoAmI(key.key_id, key.tenant, role, actions_of(role))
        return Response(content=_encode(answer), media_type=MediaType.JSON)

    @post("/v1/admin/policy/reload", status_code=200)
    async def reload_policy(request: Request[Any, Any, Any]) -> Response[bytes]:
        reloader = gateway.reloader
        key = await caller(request, "policy.reload", "policy.reload", str(reloader.path))
        if isinstance(key, Response):
            return key
        before = reloader.policy
        acting = (
            reload_audit.acting_as(key.key_id, tenant=key.tenant, client=client_of(request))
            if reload_audit is not None
            else contextlib.nullcontext()
        )
        with acting:  # synchronous: the entry its listener writes is this caller's
            adopted = reloader.reload()
        if not adopted:
            return render(
                PolicyInvalid(
                    f"The policy was not reloaded; the last good one keeps serving. {reloader.last_error}"
                )
            )
        changed = msgspec.convert(policy_diff(before, reloader.policy), PolicyChanges)
        result = ReloadResult(True, changed, reloader.loaded_at, process)
        return Response(content=_encode(result), media_type=MediaType.JSON)

    async def start_drain(request: Request[Any, Any, Any]) -> Response[bytes]:
        key = await caller(request, "gateway.drain", "drain", process)
        if isinstance(key, Response):
            return key
        gateway.start_draining("admin")
        await record(request, key, "drain", process, {"in_flight": gateway.inflight.num_open}, 200)
        return drain_state()

    async def cancel_drain(request: Request[Any, Any, Any]) -> Response[bytes]:
        key = await caller(request, "gateway.drain", "drain.cancel", process)
        if isinstance(key, Response):
            return key
        was_draining = gateway.is_draining
        if not gateway.stop_draining():
            await record(request, key, "drain.cancel", process, {}, 409)
            return render(
                Conflict(
                    "This process is shutting down (SIGTERM or Ctrl-C); its drain cannot be undone.",
                    code="shutting_down",
                )
            )
        if was_draining:  # not draining: nothing was undone, nothing to record
            await record(request, key, "drain.cancel", process, {}, 200)
        return drain_state()

    # one handler for both methods: Litestar's Allow (an OPTIONS, a 405) then names both
    @route(_DRAIN, http_method=["POST", "DELETE"], status_code=200)
    async def drain(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await (start_drain if request.method == "POST" else cancel_drain)(request)

    return [whoami, reload_policy, drain]


# ------------------------------------------------------------------------------------ OpenAPI document

OPERATION_STRUCTS = (WhoAmI, PolicyChanges, PoolChanges, ReloadResult, DrainState)
_JSON = "application/json"


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }


def _operation(summary: str, response: type, **errors: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary + " (by role, docs/security.md#roles)",
        "responses": {
            "200": {
                "description": "Done.",
                "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{response.__name__}"}}},
            },
            "401": _error("No API key, or an unknown one (invalid_api_key)."),
            "403": _error("The key's role may not (insufficient_role; no role at all: admin_key_required)."),
            "429": _error("Too many failed authentications from this address (too_many_auth_failures)."),
            **errors,
        },
    }


OPERATION_PATHS: dict[str, dict[str, Any]] = {
    "/v1/admin/whoami": {
        "get": _operation("Who the caller is: name, tenant, role and the actions its role may do", WhoAmI)
    },
    "/v1/admin/policy/reload": {
        "post": _operation(
            "Re-read the answering process's policy files now",
            ReloadResult,
            **{
                "422": _error(
                    "The files do not validate; the last good policy keeps serving (policy_invalid)."
                )
            },
        )
    },
    _DRAIN: {
        "post": _operation(
            "Fail the answering gateway's readiness (every worker's) from now on; it still serves", DrainState
        ),
        "delete": _operation(
            "Undo an admin drain of the answering gateway (every worker's)",
            DrainState,
            **{
                "409": _error(
                    "SIGTERM or Ctrl-C began the drain: the process is shutting down (shutting_down)."
                )
            },
        ),
    },
}
