"""Calibrates the semantic cache's threshold and measures its lookup on a real Redis.

    python bench/semantic_cache.py [--entries 2000] [--lookups 2000] [--threshold 0.92]

1. Quality. ``bench/data/semantic_pairs.jsonl`` holds labelled prompt pairs: paraphrases that should
   hit (``same: true``) and near misses that must not (one number, sign, name, unit, negation or
   language apart, numbers in another order, or the opposite question). The pairs are one-turn
   chats: a conversation's context and the request's other fields never need a threshold, since a
   hit needs them equal (``scope``). Each prompt is embedded with all-MiniLM-L6-v2 as the engine's
   embedder does (transformers, mean pooling, L2 norm: ``backends.embedder``), as the gateway would
   send it (``canonical_text`` of a one-turn chat). For each threshold it reports, embedding alone and
   with the literal guard (``literals_match``: numbers in order and with their sign, names, negations
   and units must match; no word may be the other's with a negating prefix): the pairs
   that would hit, precision (the hits that were paraphrases) and hit rate (the paraphrases that hit).
2. Lookup cost. One gateway's ``SemanticCache`` stores ``--entries`` entries (the dataset's vectors,
   then random unit vectors) in Redis; another's mirrors them, then ``--lookups`` lookups are timed one
   at a time: the log pull (one ``XRANGE``, usually empty), the usearch search and, on a hit, the body
   ``GET``. The embedding call is not included. ``get_p99_ms`` is one plain ``GET``'s p99 in the
   same run: the floor any Redis round trip sets on that machine at that time. Redis: ``REDIS_URL``,
   else 127.0.0.1:6379 (keys under a fresh tenant, deleted afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from gateway.cache.blobs import RedisBlobs
from gateway.cache.entry import Entry, EntryKind
from gateway.semantic_cache import RedisSemanticLog, SemanticCache, canonical_text, literals, literals_match

DATA = Path(__file__).resolve().parent / "data" / "semantic_pairs.jsonl"
THRESHOLDS = (0.80, 0.84, 0.86, 0.88, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98)


def load_pairs(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def as_sent(prompt: str) -> str:
    """The text the gateway embeds for a one-turn chat asking ``prompt``."""
    text = canonical_text({"messages": [{"role": "user", "content": prompt}]})
    assert text is not None
    return text


def embed_all(texts: list[str]) -> dict[str, np.ndarray]:
    from backends.embedder import Embedder

    vectors, _ = Embedder().embed(texts)
    return {text: np.asarray(v, dtype=np.float32) for text, v in zip(texts, vectors, strict=True)}


def score(
    pairs: list[dict[str, Any]], sims: list[float], guards: list[bool], threshold: float
) -> dict[str, Any]:
    """Hits, precision and hit rate at ``threshold``, without and with the literal guard."""
    row: dict[str, Any] = {"threshold": threshold}
    num_same = sum(p["same"] for p in pairs)
    for name, use_guard in (("embedding", False), ("guarded", True)):
        hits = [
            p for p, s, g in zip(pairs, sims, guards, strict=True) if s >= threshold and (g or not use_guard)
        ]
        good = sum(p["same"] for p in hits)
        row[name] = {
            "hits": len(hits),
            "precision": round(good / len(hits), 3) if hits else 1.0,
            "hit_rate": round(good / num_same, 3),
            "false_hits": sorted({p["kind"] for p in hits if not p["same"]}),
        }
    return row


async def lookup_latency(
    url: str, vectors: list[np.ndarray], queries: list[np.ndarray], *, num_entries: int, num_lookups: int,
    threshold: float,
) -> dict[str, float]:  # fmt: skip
    tenant, pool = f"bench-{os.urandom(4).hex()}", "small"
    writer = SemanticCache(RedisSemanticLog(RedisBlobs(url, timeout_s=2.0)))
    reader = SemanticCache(RedisSemanticLog(RedisBlobs(url, timeout_s=2.0)))
    rng = np.random.default_rng(0)
    body = Entry(EntryKind.CHAT, b'{"choices":[{"message":{"content":"' + b"x" * 2000 + b'"}}]}')
    bound: dict[str, Any] = {"ttl_s": 3600.0, "max_entries": num_entries}
    stored = list(vectors[:num_entries])
    stored += [rng.standard_normal(384).astype(np.float32) for _ in range(num_entries - len(stored))]
    for vector in stored:
        await writer.store(tenant, pool, vector, "|", body, max_entry_bytes=1 << 20, **bound)
    started = time.perf_counter()
    await reader.lookup(tenant, pool, queries[0], "|", threshold=threshold, **bound)  # the first pull
    catch_up_ms = (time.perf_counter() - started) * 1000
    times_ms: dict[bool, list[float]] = {True: [], False: []}  # by hit: a hit reads its body too
    for i in range(num_lookups):
        query = queries[i % len(queries)]
        started = time.perf_counter()
        hit = await reader.lookup(tenant, pool, query, "|", threshold=threshold, **bound)
        times_ms[hit is not None].append((time.perf_counter() - started) * 1000)
    client = writer.log.blobs.client  # type: ignore[attr-defined]
    get_ms: list[float] = []  # the floor: one plain GET of a body, on the same connection kind
    body_key = f"sy:{{t:{tenant}}}:bench-get"
    await client.set(body_key, body.encode())
    for _ in range(num_lookups):
        started = time.perf_counter()
        await client.get(body_key)
        get_ms.append((time.perf_counter() - started) * 1000)
    keys = [k async for k in client.scan_iter(match=f"sy:{{t:{tenant}}}:*")]
    for start in range(0, len(keys), 500):
        await client.delete(*[k.decode() for k in keys[start : start + 500]])
    await writer.close()
    await reader.close()
    every = times_ms[True] + times_ms[False]
    return {
        "entries": reader.num_entries(tenant, pool) or num_entries,
        "first_pull_ms": round(catch_up_ms, 1),
        "lookups": num_lookups,
        "hits": len(times_ms[True]),
        "p50_ms": round(statistics.median(every), 3),
        "p99_ms": p99(every),
        "p99_miss_ms": p99(times_ms[False]),
        "p99_hit_ms": p99(times_ms[True]),
        "get_p99_ms": p99(get_ms),
        "load_1m": round(os.getloadavg()[0], 2),  # other processes on the cores show in the tail
    }


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return round(ordered[int(0.99 * (len(ordered) - 1))], 3) if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--threshold", type=float, default=0.92, help="the shipped threshold")
    args = parser.parse_args()
    pairs = load_pairs()
    texts = sorted({as_sent(p[side]) for p in pairs for side in ("a", "b")})
    started = time.perf_counter()
    vectors = embed_all(texts)
    print(f"pairs: {len(pairs)} ({sum(p['same'] for p in pairs)} paraphrases), "
          f"{len(texts)} prompts embedded in {time.perf_counter() - started:.1f} s")  # fmt: skip
    sims = [float(vectors[as_sent(p["a"])] @ vectors[as_sent(p["b"])]) for p in pairs]
    guards = [literals_match(literals(as_sent(p["a"])), literals(as_sent(p["b"]))) for p in pairs]
    header = "embedding only: hits prec hit-rate"
    print(f"{'threshold':>9}  {header:<36}  with the literal guard: hits prec hit-rate")
    for threshold in THRESHOLDS:
        row = score(pairs, sims, guards, threshold)
        e, g = row["embedding"], row["guarded"]
        print(f"{threshold:>9.2f}  {e['hits']:>4} {e['precision']:>5.3f} {e['hit_rate']:>5.3f} "
              f"{','.join(e['false_hits']) or '-':<18}  {g['hits']:>4} {g['precision']:>5.3f} "
              f"{g['hit_rate']:>5.3f} {','.join(g['false_hits']) or '-'}")  # fmt: skip
    shipped = score(pairs, sims, guards, args.threshold)["guarded"]
    misses = [
        (round(s, 3), p["a"], p["b"])
        for p, s, g in zip(pairs, sims, guards, strict=True)
        if not p["same"] and s >= args.threshold and g
    ]
    print(f"shipped threshold {args.threshold}: {json.dumps(shipped)}; false hits: {misses or 'none'}")
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    a_side = [vectors[as_sent(p["a"])] for p in pairs]
    b_side = [vectors[as_sent(p["b"])] for p in pairs]
    result = asyncio.run(
        lookup_latency(url, a_side, b_side, num_entries=args.entries, num_lookups=args.lookups,
                       threshold=args.threshold)
    )  # fmt: skip
    print(f"lookup on {url.split('@')[-1]}: {json.dumps(result)}")


if __name__ == "__main__":
    main()
