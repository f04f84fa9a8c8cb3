"""Stage: the semantic cache, after the exact response cache.

A chat request the exact cache did not answer is embedded (its canonical text,
``gateway.semantic_cache.canonical``) and looked up among the answered prompts of its tenant and
pool. A hit is answered here like an exact hit (JSON as stored, or an SSE replay for a stream) with
``x-sortyard-cache: semantic-hit`` and ``x-sortyard-cache-similarity``; a miss is stored once the
upstream answered (a stream is rebuilt from its relayed deltas, as the exact cache does). Skipped:
pools the policy leaves out, sampled requests (unless ``allow_sampled``), requests with tools, images,
``n`` > 1 or structured outputs. ``Cache-Control: no-cache`` skips the lookup, ``no-store`` both.

Only a complete answer is stored: every choice finished with ``stop``. One cut by ``max_tokens``
(``length``) or by a content filter answers that one generation, not the question. A cache never
fails a request: any error in the lookup is a miss, and in the store is logged and dropped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.cache.directives import read_directives
from gateway.cache.entry import Entry, EntryKind
from gateway.cache.replay import StreamAccumulator
from gateway.errors import GatewayError
from gateway.pipeline import BytesResult, Call, Endpoint
from gateway.semantic_cache import QueryEmbedder, SemanticCache
from gateway.semantic_cache.canonical import canonical_text, is_sampled, literals, scope
from gateway.stages.cache import answer_from_entry, tap_stream

SEMANTIC_HIT = "semantic-hit"
SIMILARITY_HEADER = "x-sortyard-cache-similarity"

logger = logging.getLogger("sortyard.semantic_cache")


def _no_observer(seconds: float) -> None:
    """The default lookup-latency hook: records nothing."""


class SemanticCacheStage:
    """Answers paraphrases of answered prompts; stores what the upstream answers.

    Args:
        cache: the shared semantic cache.
        embedder: embeds the canonical text through the policy's embedding pool.
        observe_lookup_s: gets each lookup's seconds (index search and log pull, no embedding).
    """

    name = "semantic_cache"

    def __init__(
        self,
        cache: SemanticCache,
        embedder: QueryEmbedder,
        *,
        observe_lookup_s: Callable[[float], None] = _no_observer,
    ) -> None:
        self.cache = cache
        self.embedder = embedder
        self.observe_lookup_s = observe_lookup_s

    async def __call__(self, call: Call) -> None:
        try:
            await self._serve(call)
        except Exception:  # a cache never fails a request: this one goes on uncached
            logger.exception("semantic cache lookup failed; the request goes on uncached")
            self.cache.on_event("error")

    async def _serve(self, call: Call) -> None:
        pool = call.pool
        if call.endpoint is not Endpoint.CHAT or pool is None:
            return
        config = call.policy.cache.semantic
        if not config.applies_to(pool) or (not config.allow_sampled and is_sampled(call.body)):
            return
        directives = read_directives(call.headers.get("cache-control"))
        if not directives.may_store:
            return  # no-store: neither read nor write
        text = canonical_text(call.body)
        if text is None:
            return
        vector = await self.embedder.embed(call.policy, call.tenant, config, text)
        if vector is None:
            return
        guard = literals(text, scope(call.body))
        ttl_s, max_entries = config.ttl_s, config.max_entries
        if not directives.is_bypass:
            started = time.perf_counter()
            hit = await self.cache.lookup(
                call.tenant,
                pool,
                vector,
                guard,
                threshold=config.threshold_for(pool),
                ttl_s=ttl_s,
                max_entries=max_entries,
                match_literals=config.match_literals,
            )
            self.observe_lookup_s(time.perf_counter() - started)
            if hit is not None:  # semantic hit
                self._answer(call, hit.entry, hit.similarity)
                return
        accumulator = StreamAccumulator() if call.is_stream else None
        if accumulator is not None:
            call.result_filters.append(tap_stream(accumulator))
        cache, max_bytes = self.cache, config.max_entry_bytes

        async def store(call: Call, error: GatewayError | None) -> None:
            # a fallback pool's answer comes from another model: never stored under this pool
            if error is not None or call.served_pool != pool:
                return
            new: Entry | None = None
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
                new = Entry(EntryKind.CHAT, call.result.body)
            if new is not None and is_complete(new):
                await cache.store(
                    call.tenant, pool, vector, guard, new,
                    ttl_s=ttl_s, max_entries=max_entries, max_entry_bytes=max_bytes,
                )  # fmt: skip

        call.on_finish(_never_failing(store, self.cache))

    def _answer(self, call: Call, entry: Entry, similarity: float) -> None:
        consume = call.policy.cache.response.hits_consume_tokens
        answer_from_entry(call, entry, SEMANTIC_HIT, consume_tokens=consume)
        call.response_headers[SIMILARITY_HEADER] = f"{similarity:.4f}"


def is_complete(entry: Entry) -> bool:
    """Whether every choice of a chat response finished with ``stop`` (a whole answer)."""
    try:
        choices = json.loads(entry.body).get("choices")
    except (ValueError, AttributeError):
        return False
    return (
        isinstance(choices, list)
        and bool(choices)
        and all(isinstance(c, dict) and c.get("finish_reason") == "stop" for c in choices)
    )


def _never_failing(
    store: Callable[[Call, GatewayError | None], Awaitable[None]], cache: SemanticCache
) -> Callable[[Call, GatewayError | None], Awaitable[None]]:
    """``store``, logging and dropping any error: the answer was already served."""

    async def guarded(call: Call, error: GatewayError | None) -> None:
        try:
            await store(call, error)
        except Exception:
            logger.exception("semantic cache store failed; the answer is not cached")
            cache.on_event("error")

    return guarded
