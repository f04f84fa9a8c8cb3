"""What following the engines' KV events costs a gateway: CPU per event batch, in the gateway's process.

A child process runs ``--replicas`` of the reference engine's own publishers
(``backends/engine/kv_events/publisher.py``: vLLM's wire, a PUB socket and a replay socket each) and
publishes ``--rate`` batches a second from each for ``--seconds``, as engines at that many steps a
second with new or evicted blocks would. Each batch stores ``--stored`` blocks, each continuing one of
32 running sequences (a decode step's full blocks), and removes as many of the oldest from a cache
that holds ``--cache-blocks`` (first filled by one batch of prefills, before the timing). This
process follows them as a gateway does (``KvEventSubscriber`` into a ``BlockIndex``) and reports the
CPU time its process spent (the event loop and ZeroMQ's I/O thread) over the batches applied, and how
many batches it had to ask a replay for (none, when it keeps up).

    python bench/kv_events.py                        # 4 replicas x 100 batches/s for 10 s
    python bench/kv_events.py --rate 400 --replicas 8

At a few hundred batches a second the event loop wakes for nearly every batch; at higher rates
several arrive per wakeup. Both figures depend on the machine: compare runs on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEQUENCES = 32
"""Running sequences per replica whose next full blocks the batches store."""
BLOCK_SIZE = 16
SEQUENCE_BLOCKS = 64
"""A sequence this long ends and a new one starts (from no parent)."""


def publish(args: argparse.Namespace) -> int:
    """The child: ``--replicas`` publishers; endpoints on stdout, warm-up until ``go`` on stdin."""
    from backends.engine.kv_events.config import KVEventsConfig
    from backends.engine.kv_events.events import BlockRemoved, BlockStored
    from backends.engine.kv_events.publisher import ZmqEventPublisher

    timed = False
    publishers = [
        ZmqEventPublisher(
            KVEventsConfig(
                enable_kv_cache_events=True,
                endpoint="tcp://127.0.0.1:*",
                replay_endpoint="tcp://127.0.0.1:*",
            ),
            clock=lambda: 1.0 if timed else 0.0,  # ts 1: a timed batch, counted by the parent
        )
        for _ in range(args.replicas)
    ]
    print(json.dumps([[p.endpoint, p.replay_endpoint] for p in publishers]), flush=True)
    rng = random.Random(args.seed)
    tails: list[list[int | None]] = [[None] * SEQUENCES for _ in publishers]
    lengths = [[0] * SEQUENCES for _ in publishers]
    stored: list[deque[int]] = [deque() for _ in publishers]

    def store(replica: int, s: int) -> None:
        if lengths[replica][s] >= SEQUENCE_BLOCKS:
            tails[replica][s], lengths[replica][s] = None, 0
        block = rng.getrandbits(63)
        publishers[replica].record(
            BlockStored(
                block_hashes=[block],
                parent_block_hash=tails[replica][s],
                token_ids=[rng.randrange(49_152) for _ in range(BLOCK_SIZE)],
                block_size=BLOCK_SIZE,
                lora_id=None,
                medium="GPU",
                lora_name=None,
            )
        )
        tails[replica][s] = block
        lengths[replica][s] += 1
        stored[replica].append(block)

    def step(replica: int) -> None:
        for _ in range(args.stored):
            store(replica, rng.randrange(SEQUENCES))
        removed: list[int | bytes] = [
            stored[replica].popleft() for _ in range(len(stored[replica]) - args.cache_blocks)
        ]
        if removed:
            publishers[replica].record(BlockRemoved(block_hashes=removed, medium="GPU"))
        publishers[replica].flush()

    for replica in range(len(publishers)):  # fill each cache: prefills, before anyone listens
        for i in range(args.cache_blocks):
            store(replica, i % SEQUENCES)
        publishers[replica].flush()

    go = asyncio.Event()

    def on_stdin() -> None:
        sys.stdin.readline()
        go.set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(sys.stdin.fileno(), on_stdin)
        while not go.is_set():  # warm-up: the parent waits until it hears every replica
            for replica in range(len(publishers)):
                step(replica)
            await asyncio.sleep(0.05)
        nonlocal timed
        timed = True
        interval = 1 / args.rate
        start = time.perf_counter()
        for tick in range(int(args.rate * args.seconds)):
            for replica in range(len(publishers)):
                step(replica)
            await asyncio.sleep(max(0.0, start + (tick + 1) * interval - time.perf_counter()))

    asyncio.run(main())
    for publisher in publishers:
        publisher.close()
    return 0


async def follow(args: argparse.Namespace, child: subprocess.Popen[str]) -> dict[str, Any]:
    """Follow the child's publishers until every timed batch is applied; the figures."""
    from gateway.kv_routing.events import EventBatch
    from gateway.kv_routing.index import BlockIndex
    from gateway.kv_routing.subscriber import KvEventSubscriber
    from gateway.policy.kv_events import KvEventSource, KvRoutingConfig, PoolKvRouting

    class CountingIndex(BlockIndex):
        num_timed = 0

        def apply(self, key: Any, batch: EventBatch, **kwargs: Any) -> None:
            super().apply(key, batch, **kwargs)
            if batch.ts == 1.0:
                self.num_timed += 1
                if self.num_timed == expected:
                    done.set()

    expected = args.replicas * int(args.rate * args.seconds)
    done = asyncio.Event()
    assert child.stdin is not None and child.stdout is not None
    endpoints = json.loads(child.stdout.readline())
    index = CountingIndex()
    subscriber = KvEventSubscriber(index)
    labels = [f"r{i}" for i in range(args.replicas)]
    subscriber.update(
        KvRoutingConfig(
            pools={
                "chat": PoolKvRouting(
                    tokenizer="unused",
                    replicas={
                        label: KvEventSource(endpoint=endpoint, replay_endpoint=replay)
                        for label, (endpoint, replay) in zip(labels, endpoints, strict=True)
                    },
                    max_blocks_per_replica=65_536,
                )
            }
        )
    )
    subscriber.start()
    try:
        while not all(index.is_live(("chat", label)) for label in labels):
            if child.poll() is not None:
                raise SystemExit(f"the publishers exited ({child.returncode})")
            await asyncio.sleep(0.05)
        replays_before = subscriber.num_replays
        cpu, wall = time.process_time(), time.perf_counter()
        child.stdin.write("go\n")
        child.stdin.flush()
        await asyncio.wait_for(done.wait(), timeout=args.seconds * 10 + 30)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await subscriber.stop()
        child.stdin.close()
        child.wait(timeout=30)
    return {
        "replicas": args.replicas,
        "batches_per_s_each": args.rate,
        "batches": expected,
        "wall_s": round(wall, 2),
        "cpu_us_per_batch": round(cpu / expected * 1e6, 1),
        "cpu_share_of_a_core": round(cpu / wall, 3),
        "replays": subscriber.num_replays - replays_before,
        "blocks_held": [index.num_blocks(("chat", label)) for label in labels],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--rate", type=float, default=100, help="batches a second from each replica")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--stored", type=int, default=2, help="blocks each batch stores")
    parser.add_argument("--cache-blocks", type=int, default=4096, help="blocks each engine's cache holds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        return publish(args)
    child = subprocess.Popen(
        [sys.executable, __file__, "--publish", *sys.argv[1:]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        print(json.dumps(asyncio.run(follow(args, child))))
    finally:
        child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
