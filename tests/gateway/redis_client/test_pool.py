"""RespPool: a tenant's commands stay on one connection (their order holds); tenants spread over all."""

from __future__ import annotations

import asyncio

from gateway.redis_client.pool import RespPool
from gateway.redis_client.url import parse_url
from gateway.stores.key_names import KeySpace


async def test_one_tenant_one_connection_and_tenants_spread(redis_flushed: str) -> None:
    pool = RespPool(parse_url(redis_flushed), num_connections=2)
    keys = KeySpace()
    try:
        for tenant in ("acme", "globex", "initech"):
            a, b = keys.requests(tenant, "key:k1"), keys.usage(tenant, "2026-12")
            assert pool._for(("EVALSHA", "sha", 2, a, b, "{}")) is pool._for(("HGETALL", b))
        used = {id(pool._for(("GET", keys.usage(f"tenant-{i}", "2026-12")))) for i in range(20)}
        assert len(used) == 2
        # in order on one connection: the INCRs of one tenant, sent together, come back 1..50
        key = keys.requests("acme", "key:k1")
        replies = await asyncio.gather(*(pool.execute("INCR", key) for _ in range(50)))
        assert replies == list(range(1, 51))
        await asyncio.gather(*(pool.execute("SET", keys.usage(f"t{i}", "m"), i) for i in range(20)))
        assert all(c._protocol is not None for c in pool.connections)  # both connections carried some
        assert await pool.execute("PING") == b"PONG"
    finally:
        await pool.close()
