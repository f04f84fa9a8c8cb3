"""The console's sign-in routes (Litestar), present whatever the policy; 404 while SSO is off.

    GET  /console/login      -> 302 to the provider (authorization code + PKCE S256 + state + nonce)
    GET  /console/callback   the provider redirects here: exchange the code, verify the ID token,
                             set the session cookie (HttpOnly) and the CSRF cookie (readable), 302 /console
    POST /console/logout     clear both cookies (with a session: needs its x-csrf-token)

Errors are JSON in OpenAI's shape, like every other route's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.handlers import HTTPRouteHandler
from litestar.response import Redirect
from litestar.types import BeforeRequestHookHandler

from gateway.errors import GatewayError, NotFound
from gateway.policy.sso import SsoConfig
from gateway.roles import Principal
from gateway.sso.errors import InvalidToken
from gateway.sso.gate import SingleSignOn
from gateway.sso.principal import principal_from_claims
from gateway.sso.session import LOGIN, sign, unsign

__all__ = ["SignInRecorder", "sso_routes"]

SignInRecorder = Callable[[Request[Any, Any, Any], str, str | None, str, int], Awaitable[None]]
"""Told ``(request, user, tenant, action, status)`` of each sign-in and sign-out (the audit trail):
``action`` is ``console.sign_in`` or ``console.sign_out``, ``user`` ``-`` when it is not known."""

LOGIN_PATH = "/console/login"
CALLBACK_PATH = "/console/callback"
LOGOUT_PATH = "/console/logout"


def _cookie(config: SsoConfig, name: str, value: str | None, max_age: int, httponly: bool = True) -> Cookie:
    return Cookie(
        key=name,
        value=value,
        max_age=max_age,
        path="/",
        secure=config.cookie.secure,
        httponly=httponly,
        samesite="lax",  # sent on the provider's top-level redirect back, not on cross-site POSTs
    )


def sso_routes(
    sso: SingleSignOn,
    config_of: Callable[[], SsoConfig | None],
    render: Callable[[GatewayError], Response[bytes]],
    limit: BeforeRequestHookHandler | None = None,
    record: SignInRecorder | None = None,
) -> list[HTTPRouteHandler]:
    """The routes, reading the serving policy's ``sso`` section through ``config_of`` on each call;
    ``limit`` may answer instead of login and callback (they are open, and each may call the provider)."""

    def enabled() -> SsoConfig:
        config = config_of()
        if config is None:
            raise NotFound("Single sign-on is not configured (the policy has no sso section).")
        return config

    @get(LOGIN_PATH, before_request=limit)
    async def login(request: Request[Any, Any, Any]) -> Response[Any]:
        try:
            config = enabled()
            redirect = config.redirect_url or str(request.base_url).rstrip("/") + CALLBACK_PATH
            location, pending = await sso.provider(config).login.begin(redirect)
            value = sign(sso.secret(config), LOGIN, pending)
        except GatewayError as error:
            return render(error)
        name = config.cookie.name + "_login"
        return Redirect(location, status_code=302, cookies=[_cookie(config, name, value, 600)])

    @get(CALLBACK_PATH, before_request=limit)
    async def callback(request: Request[Any, Any, Any]) -> Response[Any]:
        try:
            config = enabled()
            secret = sso.secret(config)
            pending = unsign(secret, LOGIN, request.cookies.get(config.cookie.name + "_login"), time.time())
            params = {k: v for k, v in request.query_params.items() if isinstance(v, str)}
            claims = await sso.provider(config).login.finish(params, pending)
            session, csrf = sso.new_session(config, claims)
        except GatewayError as error:
            if record is not None and not isinstance(error, NotFound):
                await record(request, "-", None, "console.sign_in", error.status)
            return render(error)
        if record is not None:
            user = principal_from_claims(config, claims)
            await record(request, user.name, user.tenant, "console.sign_in", 200)
        age = config.cookie.max_age_s
        return Redirect(
            "/console",
            status_code=302,
            cookies=[
                _cookie(config, config.cookie.name, session, age),
                _cookie(config, config.cookie.name + "_csrf", csrf, age, httponly=False),
                _cookie(config, config.cookie.name + "_login", "", 0),
            ],
        )

    @post(LOGOUT_PATH, status_code=200)
    async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
        user: Principal | None = None
        try:
            config = enabled()
            if config.cookie.name in request.cookies:  # a forged logout is refused like any change
                try:
                    user = await sso.principal(config, "POST", request.headers, request.cookies)
                except InvalidToken:
                    pass  # an expired or foreign session: clearing it is harmless
        except GatewayError as error:
            if record is not None and not isinstance(error, NotFound):
                await record(request, "-", None, "console.sign_out", error.status)
            return render(error)
        if record is not None:
            await record(
                request,
                user.name if user is not None else "-",
                user.tenant if user is not None else None,
                "console.sign_out",
                200,
            )
        return Response(
            content=msgspec.json.encode({"object": "logout", "ok": True}),
            media_type=MediaType.JSON,
            cookies=[
                _cookie(config, config.cookie.name, "", 0),
                _cookie(config, config.cookie.name + "_csrf", "", 0, httponly=False),
            ],
        )

    return [login, callback, logout]
