"""The console's sign-in routes (Litestar), present whatever the policy; 404 while SSO is off.

    GET  /console/login      -> 302 to the provider (authorization code + PKCE S256 + state + nonce)
    GET  /console/callback   the provider redirects here: exchange the code, verify the ID token,
                             set the session cookie (HttpOnly) and the CSRF cookie (readable), 302 /console
    POST /console/logout     clear both cookies (with a session: needs its x-csrf-token)

Errors are JSON in OpenAI's shape, like every other route's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.handlers import HTTPRouteHandler
from litestar.response import Redirect
from litestar.types import BeforeRequestHookHandler

from gateway.errors import GatewayError, NotFound
from gateway.policy.sso import SsoConfig
from gateway.sso.errors import InvalidToken
from gateway.sso.gate import SingleSignOn
from gateway.sso.session import sign, unsign

__all__ = ["sso_routes"]

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
            value = sign(sso.secret(config), pending)
        except GatewayError as error:
            return render(error)
        name = config.cookie.name + "_login"
        return Redirect(location, status_code=302, cookies=[_cookie(config, name, value, 600)])

    @get(CALLBACK_PATH, before_request=limit)
    async def callback(request: Request[Any, Any, Any]) -> Response[Any]:
        try:
            config = enabled()
            secret = sso.secret(config)
            pending = unsign(secret, request.cookies.get(config.cookie.name + "_login"), time.time())
            params = {k: v for k, v in request.query_params.items() if isinstance(v, str)}
            claims = await sso.provider(config).login.finish(params, pending)
            session, csrf = sso.new_session(config, claims)
        except GatewayError as error:
            return render(error)
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
        try:
            config = enabled()
            if config.cookie.name in request.cookies:  # a forged logout is refused like any change
                try:
                    await sso.principal(config, "POST", request.headers, request.cookies)
                except InvalidToken:
                    pass  # an expired or foreign session: clearing it is harmless
        except GatewayError as error:
            return render(error)
        return Response(
            content=msgspec.json.encode({"object": "logout", "ok": True}),
            media_type=MediaType.JSON,
            cookies=[
                _cookie(config, config.cookie.name, "", 0),
                _cookie(config, config.cookie.name + "_csrf", "", 0, httponly=False),
            ],
        )

    return [login, callback, logout]
