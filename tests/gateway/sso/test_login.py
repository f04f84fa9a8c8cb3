"""The console login's checks against the real provider: state, a missing login, a wrong PKCE
verifier, the nonce of the ID token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gateway.sso.errors import InvalidToken
from gateway.sso.jwks import ProviderKeys
from gateway.sso.login import OidcLogin
from gateway.sso.tokens import TokenVerifier
from tests.gateway.sso.conftest import sso_config
from tests.support.oidc_provider import OidcProvider

CALLBACK = "http://gateway/console/callback"


@pytest.fixture
async def login(provider: OidcProvider) -> AsyncIterator[OidcLogin]:
    config = sso_config(provider.issuer)
    async with httpx.AsyncClient() as http:
        keys = ProviderKeys(config, http)
        yield OidcLogin(config, keys, TokenVerifier(config, keys), http, {})


async def _code(login: OidcLogin) -> tuple[dict[str, str], dict[str, object]]:
    location, pending = await login.begin(CALLBACK)
    async with httpx.AsyncClient() as browser:
        back = (await browser.get(location)).headers["location"]
    params = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    return params, pending


async def test_a_login_gives_the_id_token_claims(login: OidcLogin) -> None:
    params, pending = await _code(login)
    claims = await login.finish(params, pending)
    assert claims["aud"] == "console" and claims["nonce"] == pending["nonce"]


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ({"pending": None}, "No login in progress"),
        ({"state": "other"}, "state does not match"),
        ({"verifier": "not-the-verifier"}, "refused the code"),
        ({"nonce": "not-the-nonce"}, "nonce"),
        ({"error": "access_denied"}, "refused the login"),
    ],
    ids=["no-login", "state", "pkce", "nonce", "denied"],
)
async def test_a_spoiled_callback_is_refused(login: OidcLogin, spoil: dict[str, str], message: str) -> None:
    params, pending = await _code(login)
    if "pending" in spoil:
        pending = None  # type: ignore[assignment]
    for name in ("verifier", "nonce"):
        if name in spoil:
            pending[name] = spoil[name]
    params.update({k: v for k, v in spoil.items() if k in ("state", "error")})
    with pytest.raises(InvalidToken, match=message):
        await login.finish(params, pending)
