"""The subscriber over real ZeroMQ on loopback: a publisher in miniature (``tests.support.kv_events``)
feeds it; a gap is filled by replay, an unfillable gap and a restart forget the replica's blocks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
import zmq
import zmq.asyncio

from gateway.kv_routing.index import BlockIndex, prompt_chain
from gateway.kv_routing.subscriber import KvEventSubscriber, SequenceTracker
from gateway.policy.kv_events import KvRoutingConfig
from tests.support.kv_events import KvPublisher, cleared, stored

KEY = ("large", "large-0")
PROMPT = list(range(32))  # 8 blocks of 4


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for ``predicate`` (events cross real sockets), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


@pytest.fixture
async def context() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    yield ctx
    ctx.destroy(linger=0)


def config_for(publisher: KvPublisher, **pool: object) -> KvRoutingConfig:
    source = {"endpoint": publisher.endpoint, "replay_endpoint": publisher.replay_endpoint}
    document = {"pools": {"large": {"tokenizer": "/unused", "replicas": {"large-0": source}, **pool}}}
    return msgspec.convert(document, KvRoutingConfig)


async def subscribed(
    publisher: KvPublisher, context: zmq.asyncio.Context, index: BlockIndex, **pool: object
) -> KvEventSubscriber:
    """A running subscriber that has seen the publisher's first batch (a SUB joins a little late)."""
    subscriber = KvEventSubscriber(index, socket_factory=context.socket)
    subscriber.update(config_for(publisher, **pool))
    subscriber.start()
    deadline = time.monotonic() + 5.0
    while not index.is_live(KEY):  # a batch at a time until one arrives: the first seen starts the sequence
        assert time.monotonic() < deadline, "the subscriber never received a batch"
        await publisher.publish([])
        await asyncio.sleep(0.01)
    return subscriber


def block(i: int, parent: bool = True) -> dict:
    return stored([f"b{i}"], f"b{i - 1}" if parent and i else None, PROMPT[i * 4 : i * 4 + 4], 4)


def hits(index: BlockIndex) -> int:
    return index.num_hits(KEY, prompt_chain(PROMPT, 4))


async def test_stored_blocks_arrive_and_a_gap_is_filled_by_replay(context: zmq.asyncio.Context) -> None:
    index = BlockIndex()
    async with KvPublisher(context) as publisher:
        subscriber = await subscribed(publisher, context, index)
        try:
            await publisher.publish([block(0), block(1)])
            await until(lambda: hits(index) == 2)
            replays = subscriber.num_replays  # joining may have asked for a replay already
            await publisher.publish([block(2)], drop=True)  # lost on the wire
            await publisher.publish([block(3)])
            await until(lambda: hits(index) == 4)
            assert subscriber.num_replays == replays + 1
            await publisher.publish([block(4)])
            await until(lambda: hits(index) == 5)
            assert index.num_forgotten == 0
        finally:
            await subscriber.stop()


async def test_joining_a_running_engine_replays_what_it_cached_before(
    context: zmq.asyncio.Context,
) -> None:
    index = BlockIndex()
    async with KvPublisher(context) as publisher:
        await publisher.publish([block(0), block(1)], drop=True)  # before anyone listened
        await publisher.publish([block(2)], drop=True)
        subscriber = await subscribed(publisher, context, index)  # hears a later batch first
        try:
            await until(lambda: hits(index) == 3)  # the replay may still be arriving
            assert publisher.num_replays == 1
            await publisher.publish([block(3)])
            await until(lambda: hits(index) == 4)
        finally:
            await subscriber.stop()


async def test_events_resuming_after_staleness_replay_what_was_forgotten(
    context: zmq.asyncio.Context,
) -> None:
    now = [0.0]
    index = BlockIndex(clock=lambda: now[0])
    async with KvPublisher(context) as publisher:
        subscriber = await subscribed(publisher, context, index, stale_after_s=60)
        try:
            await publisher.publish([block(0), block(1)])
            await until(lambda: hits(index) == 2)
            now[0] += 61  # the engine went quiet: its blocks stop steering picks
            assert not index.is_live(KEY) and hits(index) == 0
            replays = publisher.num_replays
            await publisher.publish([block(2)])  # busy again: a child of blocks stored long ago
            await until(lambda: hits(index) == 3)
            assert publisher.num_replays == replays + 1
        finally:
            await subscriber.stop()


async def test_a_gap_without_replay_forgets_then_rebuilds(context: zmq.asyncio.Context) -> None:
    index = BlockIndex()
    async with KvPublisher(context, with_replay=False, shape="array") as publisher:
        subscriber = await subscribed(publisher, context, index)
        try:
            await publisher.publish([block(0), block(1)])
            await until(lambda: hits(index) == 2)
            await publisher.publish([block(2)], drop=True)
            await publisher.publish([block(0, parent=False)])  # after the gap: a new prompt's first block
            await until(lambda: index.num_forgotten == 1)
            assert hits(index) == 1 and index.num_blocks(KEY) == 1
        finally:
            await subscriber.stop()


async def test_a_restarted_engine_is_forgotten_and_cleared_blocks_go(context: zmq.asyncio.Context) -> None:
    index = BlockIndex()
    async with KvPublisher(context) as publisher:
        subscriber = await subscribed(publisher, context, index)
        try:
            await publisher.publish([block(0), block(1), block(2)])
            await until(lambda: hits(index) == 3)
            publisher.restart()
            await publisher.publish([block(0, parent=False)])
            await until(lambda: index.num_forgotten == 1)
            assert hits(index) == 1
            await publisher.publish([cleared()])
            await until(lambda: index.num_blocks(KEY) == 0)
        finally:
            await subscriber.stop()


async def test_an_undecodable_batch_forgets_the_replica(context: zmq.asyncio.Context) -> None:
    index = BlockIndex()
    async with KvPublisher(context) as publisher:
        subscriber = await subscribed(publisher, context, index)
        try:
            await publisher.publish([block(0)])
            await until(lambda: hits(index) == 1)
            await publisher.publish([], raw=b"\xc1 not msgpack")
            await until(lambda: index.num_forgotten == 1)
            await publisher.publish([block(0, parent=False), block(1)])  # the next batch rebuilds it
            await until(lambda: hits(index) == 2)
        finally:
            await subscriber.stop()


async def test_a_reload_that_drops_a_replica_stops_following_it(context: zmq.asyncio.Context) -> None:
    index = BlockIndex()
    async with KvPublisher(context) as publisher:
        subscriber = await subscribed(publisher, context, index)
        await publisher.publish([block(0)])
        await until(lambda: hits(index) == 1)
        replays = publisher.num_replays
        subscriber.update(config_for(publisher, load_tokens=256))  # scoring only: the stream goes on
        await publisher.publish([block(1)])
        await until(lambda: hits(index) == 2)
        assert publisher.num_replays == replays and index.num_forgotten == 0
        subscriber.update(KvRoutingConfig())
        assert not subscriber.is_following(KEY) and not index.is_live(KEY)
        await subscriber.stop()


def test_the_sequence_tracker_names_each_case() -> None:
    tracker = SequenceTracker()
    assert tracker.classify(7) == "first"
    tracker.last = 7
    assert [tracker.classify(s) for s in (8, 10, 7, 3, 0)] == ["next", "gap", "restart", "restart", "restart"]
    tracker.repeat_floor = 5  # a replay asked for by live message 5 reached 7: 5..7 come again live
    assert [tracker.classify(s) for s in (5, 7, 4, 0)] == ["repeat", "repeat", "restart", "restart"]
