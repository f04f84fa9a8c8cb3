"""Stage: the response cache, with single flight.

Only deterministic chat and text completions are looked up (temperature 0 or a seed; a pool can
opt in to more), under a key that hashes the tenant (unless the pool's scope is global), the pool
and the canonical request. ``Cache-Control: no-cache`` skips the lookup, ``no-store`` also the
write. A hit is answered here, as JSON or as a faithful SSE replay; identical concurrent misses
make one upstream call and the others are answered from it. Every response says
``x-sortyard-cache: hit|miss|bypass``. Hits count as requests (the limits stage ran before);
their tokens count against tokens-per-minute only when the policy says so.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from gateway.cache import (
    BYPASS,
    CACHE_HEADER,
    HIT,
    MISS,
    CacheKeys,
    Entry,
    EntryKind,
    ResponseCache,
    SingleFlight,
    StreamAccumulator,
    is_cacheable,
    read_directives,
    replay_sse,
)
from gateway.cache.single_flight import Flight
from gateway.errors import GatewayError
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult, Usage
from gateway.sse import read_body_usage

_KINDS = {Endpoint.CHAT: EntryKind.CHAT, Endpoint.COMPLETIONS: EntryKind.COMPLETION}


def _usage_of(entry: Entry) -> Usage:
    try:
        usage, _ = read_body_usage(entry.body)
    except GatewayError:
        return Usage(0, 0)
    return usage or Usage(0, 0)


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


class ResponseCacheStage:
    """Answers repeats from the cache and stores what the upstream answers."""

    name = "cache"

    def __init__(self, cache: ResponseCache, flights: SingleFlight, keys: CacheKeys | None = None) -> None:
        self.cache = cache
        self.flights = flights
        self.keys = keys or CacheKeys()

    async def __call__(self, call: Call) -> None:
        kind = _KINDS.get(call.endpoint)
        if kind is None or call.pool is None:
            return
        config = call.policy.cache.response_for(call.pool)
        if not config.enabled:
            return
        directives = read_directives(call.headers.get("cache-control"))
        if directives.is_bypass or not is_cacheable(call.body, config.cache_nondeterministic):
            call.cache_status = BYPASS
            call.response_headers[CACHE_HEADER] = BYPASS
            return
        key = self.keys.response_for(call.tenant, call.pool, call.endpoint.name, call.body, config.scope)
        entry = await self.cache.get(key)
        flight: Flight | None = None
        if entry is None:
            wait_s = call.deadline - time.perf_counter()  # waiting for the identical request spends it
            flight = await self.flights.acquire(key, wait_s=wait_s)
            entry = flight.entry
        if entry is not None:  # cache hit (or answered by an identical request in flight)
            self._answer(call, entry, config.hits_consume_tokens)
            return
        assert flight is not None
        call.cache_status = MISS
        call.response_headers[CACHE_HEADER] = MISS
        accumulator = StreamAccumulator() if call.is_stream else None
        if accumulator is not None:
            call.result_filters.append(tap_stream(accumulator))
        ttl_s, max_bytes, may_store = config.ttl_s, config.max_entry_bytes, directives.may_store

        async def store(call: Call, error: GatewayError | None) -> None:
            new: Entry | None = None
            # a fallback pool's answer comes from another model: never stored under this pool's key
            if error is None and may_store and call.served_pool == call.pool:
                if accumulator is not None:
                    usage = call.usage
                    new = accumulator.entry(
                        usage={
                            "prompt_tokens": usage.input_tokens,
                            "completion_tokens": usage.output_tokens,
                            "total_tokens": usage.input_tokens + usage.output_tokens,
                        }
                        if usage
                        else None
                    )
                elif isinstance(call.result, BytesResult) and call.result.status == 200:
                    new = Entry(kind, call.result.body)
                if new is not None:
                    await self.cache.put(key, new, ttl_s, max_entry_bytes=max_bytes)
            await flight.release(new)

        call.on_finish(store)

    def _answer(self, call: Call, entry: Entry, consume_tokens: bool) -> None:
        answer_from_entry(call, entry, HIT, consume_tokens=consume_tokens)


def answer_from_entry(call: Call, entry: Entry, status: str, *, consume_tokens: bool) -> None:
    """Answer ``call`` from a cached ``entry`` (a stream is replayed as events): the cache status and
    header, and its usage when hits consume tokens (else none). The response cache's and the
    semantic cache's hits both answer so."""
    call.cache_status = status
    call.response_headers[CACHE_HEADER] = status
    call.usage = _usage_of(entry) if consume_tokens else Usage(0, 0)
    if call.is_stream:
        call.result = StreamResult(_one(replay_sse(entry, include_usage=call.include_usage)))
    else:
        call.result = BytesResult(200, entry.body)


def tap_stream(accumulator: StreamAccumulator):  # type: ignore[no-untyped-def]
    """A result filter that lets the accumulator see every byte of the stream it relays."""

    async def apply(call: Call, result: BytesResult | StreamResult) -> BytesResult | StreamResult:
        if isinstance(result, StreamResult):
            result.events = _tapped(result.events, accumulator)
        return result

    return apply


async def _tapped(events: AsyncIterator[bytes], accumulator: StreamAccumulator) -> AsyncIterator[bytes]:
    try:
        async for chunk in events:
            accumulator.feed(chunk)
            yield chunk
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
