"""Stage: the embedding cache, per input string and model.

The inputs of ``/v1/embeddings`` are looked up one by one (one round trip for all of them). When
every input hits, the response is built here; otherwise only the missing inputs go upstream and
the answer is merged back in the original order, with the new vectors stored. Vectors are kept as
the upstream's raw JSON values, so floats and base64 strings round-trip byte for byte. Vectors a
fallback pool served are not stored: they come from another model than the entry's pool names.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.cache import (
    CACHE_HEADER,
    HIT,
    MISS,
    CacheKeys,
    embedding_inputs,
    embedding_options,
    read_directives,
)
from gateway.cache.embedding_cache import EmbeddingCache
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult, Usage


class _Item(msgspec.Struct):
    index: int
    embedding: msgspec.Raw


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    total_tokens: int = 0


class _Response(msgspec.Struct):
    data: list[_Item]
    usage: _Usage | None = None


_decode_response = msgspec.json.Decoder(_Response).decode
_encode = msgspec.json.encode


def build_response(model: str, vectors: list[bytes], usage: _Usage) -> bytes:
    """An OpenAI embeddings response around raw JSON vectors, without decoding them."""
    items = b",".join(
        b'{"object":"embedding","index":%d,"embedding":%s}' % (i, vector) for i, vector in enumerate(vectors)
    )
    return (
        b'{"object":"list","data":['
        + items
        + b'],"model":'
        + _encode(model)
        + b',"usage":'
        + _encode({"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.total_tokens})
        + b"}"
    )


class EmbeddingCacheStage:
    """Serves cached vectors and sends only the misses upstream."""

    name = "embedding_cache"

    def __init__(self, cache: EmbeddingCache, keys: CacheKeys | None = None) -> None:
        self.cache = cache
        self.keys = keys or CacheKeys()

    async def __call__(self, call: Call) -> None:
        if call.endpoint is not Endpoint.EMBEDDINGS or call.pool is None:
            return
        config = call.policy.cache.embeddings
        directives = read_directives(call.headers.get("cache-control"))
        if not config.enabled or directives.is_bypass:
            return
        original: Any = call.body.get("input")
        inputs = embedding_inputs(original)
        if not inputs:
            return
        keys = self.keys.embeddings(
            call.tenant, call.pool, inputs, options=embedding_options(call.body), scope=config.scope
        )
        cached = await self.cache.get_many(keys)
        missing = [i for i, vector in enumerate(cached) if vector is None]
        if not missing:  # every input hit
            call.cache_status = HIT
            call.response_headers[CACHE_HEADER] = HIT
            call.usage = Usage(0, 0)
            call.result = BytesResult(200, build_response(call.model, [v for v in cached if v], _Usage()))
            return
        call.cache_status = MISS
        call.response_headers[CACHE_HEADER] = MISS
        if len(missing) < len(inputs):
            call.body["input"] = [inputs[i] for i in missing]
        cache, ttl_s, may_store = self.cache, config.ttl_s, directives.may_store

        async def merge(call: Call, result: BytesResult | StreamResult) -> BytesResult | StreamResult:
            if not isinstance(result, BytesResult) or result.status != 200:
                return result
            try:
                answer = _decode_response(result.body)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return result  # not ours to judge: relay it as the upstream sent it
            fresh = {item.index: bytes(item.embedding) for item in answer.data}
            if sorted(fresh) != list(range(len(missing))):
                return result
            served_by_pool = call.replica is None or call.replica.pool == call.pool
            if may_store and served_by_pool:  # a fallback's vectors are another model's
                await cache.put_many([(keys[i], fresh[n]) for n, i in enumerate(missing)], ttl_s)
            if len(missing) == len(inputs):
                return result
            vectors = list(cached)
            for n, i in enumerate(missing):
                vectors[i] = fresh[n]
            body = build_response(call.model, [v for v in vectors if v is not None], answer.usage or _Usage())
            return BytesResult(200, body)

        call.result_filters.append(merge)
