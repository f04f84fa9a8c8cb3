"""The ZeroMQ publisher over real loopback sockets: PUB frames, seq numbers, the replay and its end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from backends.engine.block_manager import BlockManager
from backends.engine.kv_events.config import KVEventsConfig
from backends.engine.kv_events.events import AllBlocksCleared, BlockRemoved, KVEventBatch, decode_batch
from backends.engine.kv_events.publisher import (
    END_SEQ,
    NullEventPublisher,
    ZmqEventPublisher,
    build_publisher,
)
from backends.engine.kv_groups import KVGroups

DEADLINE_S = 10.0
LOOPBACK = "tcp://127.0.0.1:*"  # a free port, chosen by the kernel at bind


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def publisher(ctx: zmq.Context[Any]) -> Iterator[ZmqEventPublisher]:
    config = KVEventsConfig(True, endpoint=LOOPBACK, replay_endpoint=LOOPBACK, buffer_steps=3, topic="kv")
    pub = ZmqEventPublisher(config, context=ctx, clock=lambda: 42.0)
    yield pub
    pub.close()


def recv(sock: zmq.Socket[Any], timeout_s: float = DEADLINE_S) -> list[bytes]:
    assert sock.poll(int(timeout_s * 1000)), "nothing arrived before the deadline"
    return sock.recv_multipart()


def publish(pub: ZmqEventPublisher, num_removed: int = 1) -> None:
    for i in range(num_removed):
        pub.record(BlockRemoved([i], "GPU", group_idx=0))
    pub.flush()


def test_batches_arrive_in_order_and_the_replay_returns_the_buffer(
    ctx: zmq.Context[Any], publisher: ZmqEventPublisher
) -> None:
    sub = ctx.socket(zmq.SUB)
    sub.connect(publisher.endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv")
    # a SUB socket joins a moment after connect: publish until the first batch gets through
    num_warmup = 0
    deadline = time.monotonic() + DEADLINE_S
    while not sub.poll(50):
        assert time.monotonic() < deadline, "the subscription never took"
        publish(publisher)
        num_warmup += 1
    publish(publisher, num_removed=2)  # two evictions in one step: one event
    publisher.record(AllBlocksCleared())
    publisher.record(AllBlocksCleared())
    publisher.flush()
    publisher.flush()  # a step without events publishes nothing
    last = num_warmup + 1
    seqs: list[int] = []
    batches: dict[int, KVEventBatch] = {}
    while not seqs or seqs[-1] < last:
        topic, seq_bytes, payload = recv(sub)
        assert topic == b"kv"
        seqs.append(int.from_bytes(seq_bytes, "big"))
        batches[seqs[-1]] = batch = decode_batch(payload)
        assert batch.ts == 42.0 and batch.data_parallel_rank == 0
    assert seqs == list(range(seqs[0], last + 1))  # consecutive from the first that got through
    assert batches[last - 1].events == [BlockRemoved([0, 1], "GPU", group_idx=0)]
    assert batches[last].events == [AllBlocksCleared()]  # duplicates folded
    # every seq a missed batch could have: from 0, the buffer (the last 3) then the end marker
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(publisher.replay_endpoint or "")
    dealer.send_multipart((b"", (0).to_bytes(8, "big")))
    replayed = []
    while True:
        empty, seq_bytes, payload = recv(dealer)
        assert empty == b""
        if seq_bytes == END_SEQ:
            assert payload == b"" and int.from_bytes(seq_bytes, "big", signed=True) == -1
            break
        replayed.append((int.from_bytes(seq_bytes, "big"), decode_batch(payload)))
    assert [s for s, _ in replayed] == list(range(max(0, last - 2), last + 1))
    assert replayed[-1][1] == batches[last]
    dealer.send_multipart((b"", last.to_bytes(8, "big")))
    assert int.from_bytes(recv(dealer)[1], "big") == last
    assert recv(dealer)[1] == END_SEQ
    dealer.send_multipart((b"", b"short"))  # malformed: ignored, the next request is still served
    dealer.send_multipart((b"", (10**6).to_bytes(8, "big")))
    assert recv(dealer)[1] == END_SEQ
    dealer.close(linger=0)
    sub.close(linger=0)


def test_close_stops_the_thread_and_is_idempotent(ctx: zmq.Context[Any]) -> None:
    pub = ZmqEventPublisher(KVEventsConfig(True, endpoint=LOOPBACK), context=ctx)
    publish(pub)
    pub.close()
    assert not pub._thread.is_alive() and pub.num_published_batches == 1
    pub.close()


def test_a_taken_port_fails_at_start(ctx: zmq.Context[Any], publisher: ZmqEventPublisher) -> None:
    with pytest.raises(zmq.ZMQError):
        ZmqEventPublisher(
            KVEventsConfig(True, endpoint=LOOPBACK, replay_endpoint=publisher.replay_endpoint), context=ctx
        )


def test_build_publisher_attaches_the_sink_only_when_enabled(ctx: zmq.Context[Any]) -> None:
    bm = BlockManager(4, 4)
    assert isinstance(build_publisher(None, bm), NullEventPublisher) and bm.event_sink is None
    off = KVEventsConfig(enable_kv_cache_events=False)
    assert isinstance(build_publisher(off, bm), NullEventPublisher) and bm.event_sink is None
    pub = build_publisher(KVEventsConfig(True, endpoint=LOOPBACK), bm)
    try:
        assert isinstance(pub, ZmqEventPublisher) and bm.event_sink is pub and bm.group_idx == 0
    finally:
        pub.close()


def test_two_kv_groups_publish_as_groups_0_and_1() -> None:
    full = BlockManager(4, 4)
    sliding = BlockManager(4, 4, sliding_window=8, is_sliding_group=True)
    pub = build_publisher(KVEventsConfig(True, endpoint=LOOPBACK), KVGroups(full, sliding))
    try:
        assert full.event_sink is pub and sliding.event_sink is pub
        assert (full.group_idx, sliding.group_idx) == (0, 1)
    finally:
        pub.close()
