"""gateway/semantic_cache/semantic_cache.py: lookups over a shared log, by similarity and literals."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np

from gateway.cache.blobs import RedisBlobs
from gateway.cache.entry import Entry, EntryKind
from gateway.semantic_cache.canonical import literals
from gateway.semantic_cache.log import RedisSemanticLog
from gateway.semantic_cache.semantic_cache import SemanticCache
from tests.gateway.cache.conftest import Events
from tests.gateway.semantic_cache.conftest import Logs

TTL: dict[str, Any] = {"ttl_s": 60.0, "max_entries": 100}


def vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def answer(text: str) -> Entry:
    return Entry(EntryKind.CHAT, b'{"answer":"' + text.encode() + b'"}')


def gateway(logs: Logs, events: Events | None = None) -> SemanticCache:
    return SemanticCache(
        logs.new(), on_event=events if events is not None else Events(), wall_clock=logs.clock
    )


async def store(
    cache: SemanticCache, tenant: str, vector: np.ndarray, text: str, literals: str = "|"
) -> None:
    stored = await cache.store(tenant, "small", vector, literals, answer(text), max_entry_bytes=4096, **TTL)
    assert stored


async def test_an_entry_one_gateway_stores_is_found_by_another(logs: Logs) -> None:
    events = Events()
    first, second = gateway(logs), gateway(logs, events)
    assert await second.lookup("acme", "small", vec(1, 0, 0), "|", threshold=0.9, **TTL) is None
    await store(first, "acme", vec(1, 0, 0), "paris")
    hit = await second.lookup("acme", "small", vec(1, 0.1, 0), "|", threshold=0.9, **TTL)
    assert hit is not None and hit.entry == answer("paris")
    assert 0.99 < hit.similarity <= 1.0
    assert (events["miss"], events["hit"]) == (1, 1)


async def test_never_across_tenants_or_pools(logs: Logs) -> None:
    cache = gateway(logs)
    await store(cache, "acme", vec(1, 0), "acme's secret")
    assert await cache.lookup("globex", "small", vec(1, 0), "|", threshold=0.5, **TTL) is None
    assert await cache.lookup("acme", "large", vec(1, 0), "|", threshold=0.5, **TTL) is None
    assert await cache.lookup("acme", "small", vec(1, 0), "|", threshold=0.5, **TTL) is not None


async def test_threshold_and_literals_decide(logs: Logs) -> None:
    cache = gateway(logs)
    five, fifty = literals("5 km in miles", "scope"), literals("50 km in miles", "scope")
    await store(cache, "acme", vec(1, 0), "five", literals=five)
    near = vec(0.95, np.sqrt(1 - 0.95**2))  # cosine 0.95
    assert await cache.lookup("acme", "small", near, five, threshold=0.96, **TTL) is None
    hit = await cache.lookup("acme", "small", near, five, threshold=0.94, **TTL)
    assert hit is not None and abs(hit.similarity - 0.95) < 1e-3
    assert await cache.lookup("acme", "small", near, fifty, threshold=0.5, **TTL) is None
    assert await cache.lookup("acme", "small", near, fifty, threshold=0.5, match_literals=False, **TTL)
    other_scope = literals("5 km in miles", "another scope")  # another context or max_tokens
    unguarded: dict[str, Any] = {"threshold": 0.5, "match_literals": False, **TTL}
    assert await cache.lookup("acme", "small", near, other_scope, **unguarded) is None


async def test_the_best_candidate_with_matching_literals_wins(logs: Logs) -> None:
    cache = gateway(logs)
    await store(cache, "acme", vec(1, 0), "fifty", literals=literals("50"))
    await store(cache, "acme", vec(0.98, 0.2), "five", literals=literals("5"))
    hit = await cache.lookup("acme", "small", vec(1, 0), literals("5"), threshold=0.9, **TTL)
    assert hit is not None and hit.entry == answer("five")


async def test_entries_of_other_scopes_never_crowd_out_the_match(logs: Logs) -> None:
    """The same question under many other system prompts sits at the same similarity: the search
    widens past them to the one entry of the asking scope."""
    cache = gateway(logs)
    for i in range(40):
        await store(cache, "acme", vec(1, 0), f"other {i}", literals=literals("q", f"scope {i}"))
    await store(cache, "acme", vec(1, 0), "mine", literals=literals("q", "mine"))
    hit = await cache.lookup("acme", "small", vec(1, 0), literals("q", "mine"), threshold=0.9, **TTL)
    assert hit is not None and hit.entry == answer("mine")
    unseen = literals("q", "unseen")
    assert await cache.lookup("acme", "small", vec(1, 0), unseen, threshold=0.9, **TTL) is None


async def test_a_ttl_past_a_year_is_held_to_a_year(logs: Logs) -> None:
    cache = gateway(logs)
    for ttl_s in (float("inf"), 1.0e15):
        bound: dict[str, Any] = {"ttl_s": ttl_s, "max_entries": 10}
        assert await cache.store("acme", "small", vec(1, 0), "|", answer("x"), max_entry_bytes=4096, **bound)
        assert await cache.lookup("acme", "small", vec(1, 0), "|", threshold=0.9, **bound) is not None


async def test_entries_expire_and_the_oldest_go_beyond_max_entries(logs: Logs) -> None:
    cache = gateway(logs)
    bound: dict[str, Any] = {"ttl_s": 60.0, "max_entries": 2}
    for i, vector in enumerate((vec(1, 0, 0), vec(0, 1, 0), vec(0, 0, 1))):
        await cache.store("acme", "small", vector, "|", answer(str(i)), max_entry_bytes=4096, **bound)
    assert await cache.lookup("acme", "small", vec(1, 0, 0), "|", threshold=0.9, **bound) is None  # evicted
    assert cache.num_entries("acme", "small") == 2
    assert await cache.lookup("acme", "small", vec(0, 0, 1), "|", threshold=0.9, **bound) is not None
    logs.clock.offset_s = 61
    assert await cache.lookup("acme", "small", vec(0, 0, 1), "|", threshold=0.9, **bound) is None
    assert cache.num_entries("acme", "small") == 0


async def test_a_missing_or_corrupt_body_is_never_served(logs: Logs) -> None:
    events = Events()
    cache = gateway(logs, events)
    await store(cache, "acme", vec(1, 0), "gone")
    await cache.lookup("acme", "small", vec(0, 1), "|", threshold=0.9, **TTL)  # pulls the record
    (record,) = cache._shards["acme", "small"].records.values()
    await cache.log.delete_body("acme", "small", record.entry_id)
    assert await cache.lookup("acme", "small", vec(1, 0), "|", threshold=0.9, **TTL) is None
    assert cache.num_entries("acme", "small") == 0
    assert not await cache.store(
        "acme", "small", vec(1, 0), "|", answer("x" * 100), max_entry_bytes=50, **TTL
    )
    assert events["oversize"] == 1


async def test_a_store_outage_is_a_miss_and_keeps_the_mirror() -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    events = Events()
    log = RedisSemanticLog(RedisBlobs(f"redis://127.0.0.1:{port}/0", timeout_s=0.5, on_event=events))
    cache = SemanticCache(log, on_event=events)
    assert await cache.lookup("acme", "small", vec(1, 0), "|", threshold=0.5, **TTL) is None
    assert not await cache.store("acme", "small", vec(1, 0), "|", answer("x"), max_entry_bytes=4096, **TTL)
    assert events["miss"] == 1 and events["error"] >= 1 and log.is_down
    await cache.close()
