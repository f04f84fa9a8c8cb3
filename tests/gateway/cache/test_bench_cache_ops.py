"""bench/cache_ops.py (quoted in docs/benchmarks.md) runs, on memory and on a real Redis."""

from __future__ import annotations

from bench import cache_ops
from gateway.cache import MemoryBlobs, RedisBlobs


async def test_bench_runs_on_memory_and_redis(redis_flushed: str) -> None:
    memory = await cache_ops.bench(MemoryBlobs(), iterations=5)
    redis_blobs = RedisBlobs(redis_flushed, timeout_s=2.0)
    redis = await cache_ops.bench(redis_blobs, iterations=5)
    await redis_blobs.close()
    assert memory.keys() == redis.keys()
    assert all(p50 > 0 for p50, _ in redis.values())
    assert cache_ops.ENTRY.num_bytes > 1900  # the "2 KB entry" docs/benchmarks.md quotes
