"""The console's OpenID Connect login: authorization code with PKCE (S256), state and nonce.

``begin`` makes the redirect to the provider and the values the callback must see again (state, nonce,
PKCE verifier); they travel in a short-lived signed cookie, not in server memory, so the callback may
land on any replica. ``finish`` checks the state, exchanges the code (with the verifier) at the token
endpoint and verifies the ID token, nonce included.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import httpx

from gateway.policy.sso import SsoConfig
from gateway.sso.errors import InvalidToken
from gateway.sso.jwks import ProviderKeys, ProviderUnavailable
from gateway.sso.pkce import s256_challenge
from gateway.sso.tokens import TokenVerifier

LOGIN_TTL_S = 600
"""How long a started login may take at the provider."""


_PENDING = ("state", "nonce", "verifier", "redirect")
"""What a login in progress holds (``begin``), each a string."""


class OidcLogin:
    """One provider's login flow, on the gateway's HTTP client."""

    def __init__(
        self,
        config: SsoConfig,
        keys: ProviderKeys,
        verifier: TokenVerifier,
        http: httpx.AsyncClient,
        environ: Mapping[str, str],
    ) -> None:
        self._config = config
        self._keys = keys
        self._verifier = verifier
        self._http = http
        self._environ = environ

    async def begin(self, redirect_url: str) -> tuple[str, dict[str, Any]]:
        """The provider URL to send the browser to, and the login's pending values (to sign)."""
        endpoint = await self._endpoint("authorization_endpoint")
        verifier = secrets.token_urlsafe(48)
        pending: dict[str, Any] = {
            "state": secrets.token_urlsafe(24),
            "nonce": secrets.token_urlsafe(24),
            "verifier": verifier,
            "redirect": redirect_url,
            "exp": int(time.time()) + LOGIN_TTL_S,
        }
        query = {
            "response_type": "code",
            "client_id": self._config.client_id,
            "redirect_uri": redirect_url,
            "scope": " ".join(self._config.scopes),
            "state": pending["state"],
            "nonce": pending["nonce"],
            "code_challenge": s256_challenge(verifier),
            "code_challenge_method": "S256",
        }
        sep = "&" if "?" in endpoint else "?"
        return f"{endpoint}{sep}{urlencode(query)}", pending

    async def finish(self, params: Mapping[str, str], pending: dict[str, Any] | None) -> dict[str, Any]:
        """The ID token's verified claims; InvalidToken when the callback does not match the login."""
        if pending is None or not all(isinstance(pending.get(k), str) for k in _PENDING):
            raise InvalidToken("No login in progress (or it expired): start again at /console/login.")
        if "error" in params:
            raise InvalidToken(f"The identity provider refused the login: {params['error']}.")
        state = params.get("state")
        if not state or not secrets.compare_digest(state, str(pending["state"])):
            raise InvalidToken("Login state does not match: start again at /console/login.")
        code = params.get("code")
        if not code:
            raise InvalidToken("The identity provider sent no authorization code.")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending["redirect"],
            "client_id": self._config.client_id,
            "code_verifier": pending["verifier"],
        }
        if self._config.client_secret_env:
            form["client_secret"] = self._environ.get(self._config.client_secret_env, "")
        endpoint = await self._endpoint("token_endpoint")
        try:
            response = await self._http.post(endpoint, data=form, timeout=10.0)
            tokens = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise InvalidToken(f"The token endpoint did not answer ({type(exc).__name__}).") from exc
        if response.status_code != 200 or not isinstance(tokens, dict) or "id_token" not in tokens:
            raise InvalidToken(f"The token endpoint refused the code (HTTP {response.status_code}).")
        return await self._verifier.verify(
            str(tokens["id_token"]), audience=self._config.client_id, nonce=str(pending["nonce"])
        )

    async def _endpoint(self, name: str) -> str:
        try:
            url = (await self._keys.discovery()).get(name)
        except ProviderUnavailable as exc:
            raise InvalidToken(f"The identity provider cannot be reached ({exc}).") from exc
        if not isinstance(url, str):
            raise InvalidToken(f"The identity provider's discovery document has no {name}.")
        return url
