"""Cache keys: which requests may be cached, the canonical request hash, and the Redis key names.

The canonical request is the body without the fields that do not change the answer (``stream``,
``stream_options``, ``user``, ``metadata``, ...), encoded as JSON with every object's keys sorted, so
field order never matters; float sampling parameters are normalised (``0`` and ``0.0`` are one key).
It is hashed with BLAKE2b (128 bits) together with the endpoint.

Key layout (every key of a tenant carries the tenant's hash tag, like the rate-limit store's, so a
Redis Cluster keeps one tenant's keys in one slot and an MGET over them is legal)::

    sy:{t:<tenant>}:rc:<pool>:<hash>            response entry (scope "tenant")
    sy:{g:<hash>}:rc:<pool>:<hash>              response entry (scope "global": spread over slots)
    sy:{t:<tenant>}:rc:<pool>:<hash>:lock       single-flight lock of that entry
    sy:{t:<tenant>}:pa:<pool>:<chain hash>      prefix-affinity map: chain hash -> replica label
    sy:{t:<tenant>}:em:<model>:<hash>           embedding of one input (scope "global": ``{g:em}``)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gateway.cache.config import Scope
from gateway.stores.key_names import KeySpace

# Fields that never change the answer: delivery (stream), accounting and tracing.
IGNORED_FIELDS = frozenset(
    # priority orders the engine's queue, never the answer
    {"stream", "stream_options", "user", "metadata", "store", "service_tier", "cache_salt", "priority"}
)
_FLOAT_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def canonical_request(body: Mapping[str, Any]) -> bytes:
    """The request as the cache sees it: output-changing fields only, keys sorted, numbers normalised."""
    kept = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    for name in _FLOAT_FIELDS:
        value = kept.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            kept[name] = float(value)
    return _encode_sorted(kept)


def request_hash(endpoint: str, body: Mapping[str, Any]) -> str:
    """BLAKE2b-128 hex digest of the endpoint and the canonical request."""
    digest = hashlib.blake2b(canonical_request(body), digest_size=16, person=b"sy-rc-v1")
    digest.update(endpoint.encode())
    return digest.hexdigest()


def is_cacheable(body: Mapping[str, Any], pool_opt_in: bool = False) -> bool:
    """Whether a response to ``body`` may be stored and served again.

    By default only deterministic requests: temperature 0 or a seed, and one choice (``n`` absent or
    1). A pool that opts in caches sampled requests too (every hit then answers the same sample).
    """
    if pool_opt_in:
        return True
    n = body.get("n")
    if n is not None and n != 1:
        return False
    if body.get("seed") is not None:
        return True
    temperature = body.get("temperature")
    return temperature is not None and temperature == 0 and not isinstance(temperature, bool)


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class CacheKeys:
    """Builds the caches' key names under one prefix (``sy:`` like the rate-limit store)."""

    def __init__(self, prefix: str = "sy:") -> None:
        self.prefix = prefix
        self._space = KeySpace(prefix)

    def response(self, tenant: str, pool: str, digest: str, scope: Scope = "tenant") -> str:
        """The key of one response entry; ``digest`` from :func:`request_hash`."""
        if scope == "global":
            return f"{self.prefix}{{g:{digest}}}:rc:{_escape(pool)}:{digest}"
        return f"{self._space.tenant(tenant)}:rc:{_escape(pool)}:{digest}"

    def response_for(
        self, tenant: str, pool: str, endpoint: str, body: Mapping[str, Any], scope: Scope = "tenant"
    ) -> str:
        """Hash ``body`` and name its entry in one call."""
        return self.response(tenant, pool, request_hash(endpoint, body), scope)

    @staticmethod
    def lock(entry_key: str) -> str:
        """The single-flight lock of an entry (same hash tag, same slot)."""
        return entry_key + ":lock"

    def affinity(self, tenant: str, pool: str, chain_hashes: Sequence[str]) -> list[str]:
        """The prefix-map keys of a chain of prefix hashes, in chain order."""
        root = f"{self._space.tenant(tenant)}:pa:{_escape(pool)}:"
        return [root + h for h in chain_hashes]

    def embeddings(
        self,
        tenant: str,
        model: str,
        inputs: Sequence[Any],
        *,
        options: Mapping[str, Any] | None = None,
        scope: Scope = "tenant",
    ) -> list[str]:
        """One key per input (a string or a list of token ids); ``options`` are the request's other
        output-changing fields (``dimensions``, ``encoding_format``)."""
        root = self._space.tenant(tenant) if scope == "tenant" else f"{self.prefix}{{g:em}}"
        # the options become the hash key, so one request's inputs cost one short hash each
        salt = hashlib.blake2b(_encode_sorted(dict(options)), digest_size=32).digest() if options else b""
        prefix = f"{root}:em:{_escape(model)}:"
        keys = []
        for item in inputs:
            material = item.encode() if isinstance(item, str) else _encode_sorted(item)
            digest = hashlib.blake2b(material, digest_size=16, key=salt, person=b"sy-em-v1")
            keys.append(prefix + digest.hexdigest())
        return keys


def embedding_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an embeddings request, besides model and input, that change the vectors' bytes."""
    return {k: v for k, v in body.items() if k not in ("model", "input", "user")}
