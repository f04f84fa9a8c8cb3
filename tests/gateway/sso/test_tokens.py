"""JWT verification against a real provider process: each check, and the key rotation refetch."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.sso.errors import InvalidToken
from gateway.sso.jwks import ProviderKeys
from gateway.sso.tokens import TokenVerifier
from tests.gateway.sso.conftest import sso_config
from tests.support.oidc_provider import OidcProvider


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def _verifier(provider: OidcProvider, http: httpx.AsyncClient, **changes: object) -> TokenVerifier:
    config = sso_config(provider.issuer, **changes)
    return TokenVerifier(config, ProviderKeys(config, http))


async def test_a_good_token_gives_its_claims(provider: OidcProvider, http: httpx.AsyncClient) -> None:
    claims = await _verifier(provider, http).verify(provider.mint())
    assert claims["sub"] == "alice" and claims["groups"] == ["ops-admins"]


@pytest.mark.parametrize(
    ("mint", "message"),
    [
        ({"claims": {"exp": int(time.time()) - 3600}}, "expired"),
        ({"aud": "someone-else"}, "wrong audience"),
        ({"claims": {"iss": "https://evil.example"}}, "wrong issuer"),
        ({"stranger": True}, "signature is invalid"),
        ({"kid": "never-published"}, "unknown key"),
        ({"claims": {"nbf": int(time.time()) + 3600}}, "not valid yet"),
        ({"drop": ["exp"]}, "'exp'"),
    ],
    ids=["expired", "audience", "issuer", "signature", "kid", "nbf", "no-exp"],
)
async def test_a_bad_token_is_refused_saying_why(
    provider: OidcProvider, http: httpx.AsyncClient, mint: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidToken, match=message) as refused:
        await _verifier(provider, http).verify(provider.mint(**mint))
    assert refused.value.status == 401 and refused.value.code == "invalid_token"


async def test_leeway_absorbs_clock_skew(provider: OidcProvider, http: httpx.AsyncClient) -> None:
    lately = provider.mint(claims={"exp": int(time.time()) - 20})
    assert (await _verifier(provider, http, leeway_s=60).verify(lately))["sub"] == "alice"
    with pytest.raises(InvalidToken, match="expired"):
        await _verifier(provider, http, leeway_s=0).verify(lately)


async def test_a_rotated_key_is_fetched_once(provider: OidcProvider, http: httpx.AsyncClient) -> None:
    verifier = _verifier(provider, http)
    await verifier.verify(provider.mint())  # the JWKS is cached now
    before = provider.num_jwks_fetches()
    provider.rotate("EC")  # ES256 from here on
    claims = await verifier.verify(provider.mint())
    assert claims["sub"] == "alice"
    assert provider.num_jwks_fetches() == before + 1
    with pytest.raises(InvalidToken, match="unknown key"):  # within the floor: no second refetch
        await verifier.verify(provider.mint(kid="forged"))
    assert provider.num_jwks_fetches() == before + 1


async def test_an_unsigned_token_is_refused(provider: OidcProvider, http: httpx.AsyncClient) -> None:
    unsigned = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."  # {"alg": "none"}
    with pytest.raises(InvalidToken, match="algorithm 'none'"):
        await _verifier(provider, http).verify(unsigned)
    with pytest.raises(InvalidToken, match="Malformed"):
        await _verifier(provider, http).verify("!!.e30.x")


OTHER = {"RS256": "ES256", "ES256": "RS256"}


async def test_an_algorithm_that_does_not_fit_its_key_is_refused(
    provider: OidcProvider, http: httpx.AsyncClient
) -> None:
    """ES256 in the header of a token whose kid names an RSA key (or RS256 for an EC key, once a test
    before rotated it): the library failed with a TypeError (a 500) reading one key type as the other."""
    header, payload, signature = provider.mint().split(".")
    document = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    forged = (
        base64.urlsafe_b64encode(json.dumps({**document, "alg": OTHER[document["alg"]]}).encode())
        .rstrip(b"=")
        .decode()
    )
    with pytest.raises(InvalidToken, match="does not fit its key"):
        await _verifier(provider, http).verify(f"{forged}.{payload}.{signature}")
