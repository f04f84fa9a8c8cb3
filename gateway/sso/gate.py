"""Single sign-on at the admin door: a JWT bearer token or a console session cookie -> a principal.

``SingleSignOn`` is built once per gateway and asked with the serving policy's ``sso`` section on
each admin call; the provider's state (discovery, keys) is rebuilt only when that section changes.
Nothing here imports authlib until a policy turns SSO on. An ``sk-`` key (or anything that is not a
compact JWT) is left to the API key check; a cookie-authenticated call that changes state must carry
the session's CSRF token in ``x-csrf-token`` (403 ``csrf_failed`` otherwise).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from gateway.errors import PermissionDenied, ServiceUnavailable
from gateway.policy import ApiKey
from gateway.policy.sso import SsoConfig
from gateway.roles import Principal
from gateway.sso.errors import InvalidToken
from gateway.sso.principal import as_api_key, groups_of, principal_from_claims
from gateway.sso.session import SAFE_METHODS, SESSION, csrf_ok, csrf_token, sign, unsign

if TYPE_CHECKING:
    from gateway.sso.login import OidcLogin
    from gateway.sso.tokens import TokenVerifier


class _Provider:
    """What one ``sso`` section needs at run time: its keys, token verifier and login flow."""

    def __init__(self, config: SsoConfig, http: httpx.AsyncClient, environ: Mapping[str, str]) -> None:
        from gateway.sso.jwks import ProviderKeys  # authlib: only once SSO is on
        from gateway.sso.login import OidcLogin
        from gateway.sso.tokens import TokenVerifier

        self.config = config
        self.keys = ProviderKeys(config, http)
        self.verifier: TokenVerifier = TokenVerifier(config, self.keys)
        self.login: OidcLogin = OidcLogin(config, self.keys, self.verifier, http, environ)


class SingleSignOn:
    """Bearer JWTs and console sessions; ``http``, ``environ`` and ``clock`` are injectable."""

    def __init__(
        self,
        http: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._http = http
        self._environ = os.environ if environ is None else environ
        self._clock = clock
        self._provider: _Provider | None = None

    def provider(self, config: SsoConfig) -> _Provider:
        """The provider state of ``config``, rebuilt when a reload changed the section."""
        if self._provider is None or self._provider.config != config:
            if self._http is None:
                self._http = httpx.AsyncClient(follow_redirects=False)
            self._provider = _Provider(config, self._http, self._environ)
        return self._provider

    def secret(self, config: SsoConfig) -> bytes:
        """The cookie-signing key; 503 when its environment variable is unset or short."""
        value = self._environ.get(config.cookie.secret_env, "")
        if len(value) < 16:
            raise ServiceUnavailable(
                f"Console sessions need a signing secret of 16+ characters in ${config.cookie.secret_env}.",
                code="sso_misconfigured",
            )
        return value.encode()

    async def principal(
        self, config: SsoConfig, method: str, headers: Mapping[str, str], cookies: Mapping[str, str]
    ) -> Principal | None:
        """The caller by bearer JWT or session cookie; None: neither (the API key check decides)."""
        header = headers.get("authorization")
        if header is not None:
            scheme, _, token = header.strip().partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or token.startswith("sk-") or token.count(".") != 2:
                return None  # an API key, or malformed: the key check answers
            claims = await self.provider(config).verifier.verify(token)
            return principal_from_claims(config, claims)
        value = cookies.get(config.cookie.name)
        if value is None:
            return None
        secret = self.secret(config)
        session = unsign(secret, SESSION, value, self._clock())
        if (
            session is None
            or not isinstance(session.get("sid"), str)
            or not isinstance(session.get("claims"), dict)
        ):
            raise InvalidToken("The console session is invalid or expired: sign in at /console/login.")
        if method.upper() not in SAFE_METHODS and not csrf_ok(
            secret, str(session["sid"]), headers.get("x-csrf-token")
        ):
            raise PermissionDenied(
                "A console call that changes state needs the x-csrf-token header.", code="csrf_failed"
            )
        return principal_from_claims(config, session["claims"])

    async def admin_key(
        self, config: SsoConfig | None, method: str, headers: Mapping[str, str], cookies: Mapping[str, str]
    ) -> ApiKey | None:
        """The SSO caller as the key the admin routes check, or None when SSO is off or not used."""
        if config is None:
            return None
        principal = await self.principal(config, method, headers, cookies)
        return as_api_key(principal) if principal is not None else None

    def new_session(self, config: SsoConfig, claims: dict[str, Any]) -> tuple[str, str]:
        """A signed session for verified ID token ``claims`` and its CSRF token; the user must map to
        a role (403 otherwise), and only what the principal needs is kept, so the cookie stays small."""
        principal_from_claims(config, claims)
        kept: dict[str, Any] = {k: claims[k] for k in ("sub", "preferred_username", "email") if k in claims}
        kept[config.groups_claim] = groups_of(config, claims)
        if config.tenant_claim and config.tenant_claim in claims:
            kept[config.tenant_claim] = claims[config.tenant_claim]
        sid = secrets.token_urlsafe(18)
        secret = self.secret(config)
        payload = {"sid": sid, "claims": kept, "exp": int(self._clock()) + config.cookie.max_age_s}
        return sign(secret, SESSION, payload), csrf_token(secret, sid)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
