"""The provider's discovery document and signing keys, fetched over HTTP and cached.

Both are kept for ``jwks_cache_s``. A token signed with a ``kid`` we do not hold may mean the provider
rotated its keys: the JWKS is fetched again once, but never twice within ``jwks_refetch_floor_s``, so a
stream of tokens with forged kids costs the provider one request per floor, not one per token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from gateway.policy.sso import SsoConfig
from gateway.sso.jose import JsonWebKey, KeySet


class ProviderUnavailable(Exception):
    """The provider's discovery document or JWKS could not be read."""


class ProviderKeys:
    """Discovery and JWKS of one issuer; ``http`` and ``clock`` are injectable for tests."""

    def __init__(
        self, config: SsoConfig, http: httpx.AsyncClient, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._http = http
        self._clock = clock
        self._discovery: dict[str, Any] | None = None
        self._discovery_at = 0.0
        self._keys: KeySet | None = None
        self._keys_at = 0.0
        self._last_refetch = float("-inf")
        self._lock = asyncio.Lock()
        self.num_jwks_fetches = 0

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            response = await self._http.get(url, timeout=5.0)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderUnavailable(f"{url}: {type(exc).__name__}") from exc
        if not isinstance(data, dict):
            raise ProviderUnavailable(f"{url}: not a JSON object")
        return data

    async def discovery(self) -> dict[str, Any]:
        """The issuer's ``/.well-known/openid-configuration``, cached."""
        now = self._clock()
        if self._discovery is None or now - self._discovery_at > self._config.jwks_cache_s:
            url = self._config.issuer.rstrip("/") + "/.well-known/openid-configuration"
            self._discovery = await self._get_json(url)
            self._discovery_at = now
        return self._discovery

    async def _fetch_keys(self) -> KeySet:
        url = (await self.discovery()).get("jwks_uri")
        if not isinstance(url, str):
            raise ProviderUnavailable("the discovery document has no jwks_uri")
        self.num_jwks_fetches += 1
        keys = JsonWebKey.import_key_set(await self._get_json(url))
        self._keys, self._keys_at = keys, self._clock()
        return keys

    async def key_set(self) -> KeySet:
        """The signing keys, cached for ``jwks_cache_s``."""
        async with self._lock:
            if self._keys is None or self._clock() - self._keys_at > self._config.jwks_cache_s:
                return await self._fetch_keys()
            return self._keys

    async def key_for(self, kid: str | None) -> Any | None:
        """The key with ``kid``; on a miss the JWKS is fetched again (rotation), at most once per floor."""
        keys = await self.key_set()
        found = _find(keys, kid)
        if found is not None:
            return found
        async with self._lock:
            now = self._clock()
            if now - self._last_refetch < self._config.jwks_refetch_floor_s:
                return _find(self._keys, kid) if self._keys is not None else None
            self._last_refetch = now
            return _find(await self._fetch_keys(), kid)


def _find(keys: KeySet, kid: str | None) -> Any | None:
    for key in keys.keys:
        if kid is None or key.kid == kid:
            return key
    return None
