"""Discovery and JWKS caching on an injected transport and clock: cached for jwks_cache_s, refetched
on an unknown kid at most once per floor."""

from __future__ import annotations

import httpx
import pytest

from gateway.sso.jose import JsonWebKey
from gateway.sso.jwks import ProviderKeys, ProviderUnavailable
from tests.gateway.sso.conftest import sso_config

KEY = JsonWebKey.generate_key("EC", "P-256", options={"kid": "k1"}, is_private=True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _keys(clock: Clock, seen: list[str], **changes: object) -> ProviderKeys:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.endswith("openid-configuration"):
            return httpx.Response(200, json={"jwks_uri": "https://idp.example/jwks"})
        return httpx.Response(200, json={"keys": [KEY.as_dict(is_private=False)]})

    config = sso_config("https://idp.example", jwks_cache_s=300, jwks_refetch_floor_s=10, **changes)
    return ProviderKeys(config, httpx.AsyncClient(transport=httpx.MockTransport(answer)), clock)


async def test_keys_are_cached_then_refetched_after_the_cache_time() -> None:
    clock, seen = Clock(), list[str]()
    keys = _keys(clock, seen)
    for _ in range(2):
        found = await keys.key_for("k1")
        assert found is not None and found.kid == "k1"
    assert seen == ["/.well-known/openid-configuration", "/jwks"]
    clock.now = 301
    await keys.key_for("k1")
    assert seen.count("/jwks") == 2


async def test_an_unknown_kid_refetches_once_per_floor() -> None:
    clock, seen = Clock(), list[str]()
    keys = _keys(clock, seen)
    assert await keys.key_for("k9") is None  # first fetch, then one refetch for the unknown kid
    assert await keys.key_for("k9") is None  # within the floor: from the cache
    assert seen.count("/jwks") == 2
    clock.now = 11
    assert await keys.key_for("k9") is None
    assert seen.count("/jwks") == 3


async def test_an_unreachable_provider_is_reported() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    config = sso_config("https://idp.example")
    keys = ProviderKeys(config, httpx.AsyncClient(transport=httpx.MockTransport(down)))
    with pytest.raises(ProviderUnavailable, match="ConnectError"):
        await keys.key_for("k1")
