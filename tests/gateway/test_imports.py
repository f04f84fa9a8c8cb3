"""What a gateway worker imports: redis-py stays out (~6.5 MiB and ~0.2 s per worker), and so do
pydantic, which Litestar loads by default wherever it is installed (~8 MiB), and aiohttp (~19 MiB),
which the default upstream client does not use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

NO_REDIS_PY = textwrap.dedent(
    """
    redis_py = sorted(m for m in sys.modules if m == "redis" or m.startswith("redis."))
    assert not redis_py, redis_py
    assert "pydantic" not in sys.modules
    assert "aiohttp" not in sys.modules
    """
)


def _run(code: str, **env: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + NO_REDIS_PY],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_importing_the_gateway_does_not_import_redis_py() -> None:
    _run("import sys, gateway.app, gateway.cli, gateway.state_factories")


def test_a_redis_backed_gateway_does_not_import_redis_py(redis_flushed: str) -> None:
    """The app, its store and its caches built on a real Redis, and every kind of call made."""
    _run(
        """
        import asyncio, sys
        from gateway.app import create_app
        from gateway.cache.entry import Entry, EntryKind
        from gateway.policy import load_policy
        from gateway.settings import Settings
        from gateway.state_factories import build_caches, build_store
        from gateway.telemetry.metrics import Metrics

        create_app(Settings(policy_path="policies/default.yaml"))
        policy = load_policy("policies/default.yaml")

        async def main():
            store, caches = build_store(policy), build_caches(policy, Metrics())
            assert "Redis" in type(caches.responses).__name__, caches
            assert await store.primary.ping()  # FailoverStore(RedisStore)
            await store.primary.usage("2026-11")
            entry = Entry(EntryKind.CHAT, b"{}")
            assert await caches.responses.put("sy:{c:acme}:r:1", entry, ttl_s=60)
            assert await caches.responses.get("sy:{c:acme}:r:1") == entry
            await caches.affinity.record("acme", "small", ["h1", "h2"], "replica-1", 60)
            assert await caches.affinity.lookup("acme", "small", ["h1", "h2"]) == ("replica-1", 2)
            assert await caches.embeddings.put_many([("sy:{c:acme}:e:1", b"v")], 60)
            assert await caches.embeddings.get_many(["sy:{c:acme}:e:1"]) == [b"v"]
            assert await caches.sticky.acquire_lock("sy:{c:acme}:l", "me", 60) is True
            await caches.sticky.release_lock("sy:{c:acme}:l", "me")
            await caches.close()
            await store.close()

        asyncio.run(main())
        """,
        SORTYARD_REDIS_URL=redis_flushed,
    )
