"""The prompt's embedding: one ``/v1/embeddings`` call to the policy's embedding pool, cached.

The call goes through the gateway's own upstream client and balancer (the replica is picked,
acquired, released and its breaker told, like any request's), so no second HTTP client exists.
Vectors are cached by text (``sy:{t:<tenant>}:sc:<pool>:v:<hash>``, float32 in a checksummed entry)
and identical texts in flight share one call (``gateway.cache.single_flight``, across replicas
too). Any failure (no replica, a timeout, an error status, a malformed answer) answers None: the
request goes on uncached, the semantic cache never fails it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time

import msgspec
import numpy as np

from gateway.cache.config import SemanticCacheConfig
from gateway.cache.entry import Entry, EntryKind
from gateway.cache.response_cache import ResponseCache
from gateway.cache.single_flight import SingleFlight
from gateway.errors import GatewayError
from gateway.policy import Policy
from gateway.replicas.balancer import Balancer
from gateway.replicas.client import UpstreamClient
from gateway.semantic_cache.index import Vector, normalised
from gateway.semantic_cache.log import LogKeys

logger = logging.getLogger("sortyard.cache")


class _Item(msgspec.Struct):
    embedding: list[float]


class _Answer(msgspec.Struct):
    data: list[_Item]


_decode_answer = msgspec.json.Decoder(_Answer).decode


class _Failed(Exception):
    """The embedding pool gave no vector."""


class QueryEmbedder:
    """Embeds canonical prompts through the policy's embedding pool.

    Args:
        client: the gateway's upstream client.
        balancer: picks the embedding pool's replica.
        vectors: where vectors are cached (and its blobs hold the single-flight locks).
    """

    def __init__(
        self,
        client: UpstreamClient,
        balancer: Balancer,
        vectors: ResponseCache,
        *,
        keys: LogKeys | None = None,
    ) -> None:
        self.client = client
        self.balancer = balancer
        self.flights = SingleFlight(vectors, lock_ttl_s=10.0, on_event=vectors.on_event)
        self.keys = keys or LogKeys()

    async def embed(
        self, policy: Policy, tenant: str, config: SemanticCacheConfig, text: str
    ) -> Vector | None:
        """The unit vector of ``text``, or None."""
        material = f"{config.pool}\0{config.model or ''}\0{text}".encode()
        digest = hashlib.blake2b(material, digest_size=16, person=b"sy-sc-v1").hexdigest()
        key = self.keys.vector(tenant, config.pool, digest)
        try:
            async with asyncio.timeout(config.timeout_s):
                entry, _ = await self.flights.load(
                    key,
                    lambda: self._produce(policy, config, text),
                    ttl_s=config.ttl_s,
                    wait_s=config.timeout_s,
                )
        except (_Failed, GatewayError, OSError, TimeoutError) as error:
            logger.debug("semantic cache: no embedding, request goes on uncached: %r", error)
            return None
        if entry is None or entry.kind is not EntryKind.EMBEDDING or len(entry.body) % 4:
            return None
        return np.frombuffer(entry.body, dtype=np.float32)

    async def _produce(self, policy: Policy, config: SemanticCacheConfig, text: str) -> Entry:
        state = self.balancer.pick(config.pool)
        if state is None:
            raise _Failed(f"no usable replica in pool {config.pool!r}")
        replica = state.replica
        body = msgspec.json.encode({"model": config.model or replica.model, "input": text})
        headers = {"Content-Type": "application/json", **state.headers}
        url = replica.base_url.rstrip("/") + "/embeddings"
        state.acquire()
        sent_at = time.perf_counter()
        try:
            response = await self.client.post(
                url, body, headers, policy.timeouts_for(config.pool), f"embeddings {state.label}",
                headers_s=config.timeout_s,
            )  # fmt: skip
            try:
                payload = await response.read()
            except BaseException:
                response.close()
                raise
            response.release()
        except (GatewayError, OSError) as error:
            self.balancer.record_failure(state)
            raise _Failed(str(error)) from error
        finally:
            self.balancer.release(state)
        if response.status >= 500:
            self.balancer.record_failure(state)
        if response.status != 200:
            raise _Failed(f"embedding pool answered {response.status}")
        try:
            vector = np.asarray(_decode_answer(payload).data[0].embedding, dtype=np.float32)
        except (msgspec.DecodeError, msgspec.ValidationError, IndexError) as error:
            self.balancer.record_failure(state)
            raise _Failed("malformed embeddings answer") from error
        self.balancer.record_success(state, time.perf_counter() - sent_at)
        return Entry(EntryKind.EMBEDDING, normalised(vector).tobytes())
