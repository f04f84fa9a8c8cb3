"""Follow each replica's KV events over ZeroMQ and feed them to the block index.

One asyncio task per replica connects a SUB socket to the engine's PUB endpoint and reads
``(topic, seq, payload)`` messages, ``seq`` an 8-byte big-endian counter from 0. Each message is
classified by its sequence number (:class:`SequenceTracker`):

- the next one: applied;
- a repeat (a message a replay already delivered): skipped;
- a gap (messages lost: the PUB socket drops past its high-water mark, a reconnect): the missing
  range is asked of the engine's ROUTER replay socket (a DEALER sends ``(b"", start_seq)`` and reads
  ``(seq, payload)`` frames up to ``seq == -1``); if the replay cannot fill it (no replay socket, a
  timeout, the engine's buffer no longer holds it) the replica's blocks are forgotten and rebuilt
  from the events that follow;
- lower than the last, and no replay explains it (back to 0, or to wherever a restarted engine had
  got while the SUB socket reconnected): the engine restarted, its cache is empty: the replica is
  forgotten, then the message applied;
- the first one heard, past 0: the gateway joined a running engine, whose earlier blocks (a shared
  system prompt stored long ago) no later event repeats, so the replay socket is asked for everything
  from 0 that its buffer still holds. The same when events resume after the index forgot a replica
  that had gone quiet for ``stale_after_s``.

The tasks start and stop with the app (``start``/``stop``) and follow policy reloads (``update``):
a replica dropped from ``kv_routing`` is unsubscribed and forgotten. The socket factory is injected,
so tests may hand it their own context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import zmq
import zmq.asyncio

from gateway.kv_routing.events import EventDecodeError, decode_batch
from gateway.kv_routing.index import BlockIndex, ReplicaKey
from gateway.policy.kv_events import KvEventSource, KvRoutingConfig, PoolKvRouting

__all__ = ["KvEventSubscriber", "SequenceTracker", "SocketFactory", "Verdict"]

logger = logging.getLogger("sortyard.kv_routing")

SocketFactory = Callable[[int], zmq.asyncio.Socket]
"""A new asyncio socket of a ZeroMQ socket type (``zmq.SUB``, ``zmq.DEALER``)."""
Verdict = Literal["first", "next", "repeat", "gap", "restart"]
_END_OF_REPLAY = -1


@dataclass(slots=True)
class SequenceTracker:
    """The last sequence number applied for one replica, and what a new one means.

    PUB/SUB never delivers a message twice, so a number at or below the last one is a repeat only
    when a replay got ahead of the live stream: from the live message that asked for the replay
    (``repeat_floor``) on. Anything lower means the numbering started again: the engine restarted.
    """

    last: int | None = None
    repeat_floor: int | None = None

    def classify(self, seq: int) -> Verdict:
        if self.last is None:
            return "first"
        if seq == self.last + 1:
            return "next"
        if seq > self.last:
            return "gap"
        if seq == 0 or self.repeat_floor is None or seq < self.repeat_floor:
            return "restart"
        return "repeat"


@dataclass(frozen=True, slots=True)
class _Follow:
    source: KvEventSource
    config: PoolKvRouting


class KvEventSubscriber:
    """One SUB socket per replica with a ``kv_routing`` event source, feeding ``index``."""

    def __init__(self, index: BlockIndex, *, socket_factory: SocketFactory | None = None) -> None:
        self.index = index
        self._socket_factory = socket_factory
        self._context: zmq.asyncio.Context | None = None
        self._wanted: dict[ReplicaKey, _Follow] = {}
        self._tasks: dict[ReplicaKey, tuple[KvEventSource, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # cancelled, their sockets not closed yet
        self._sequences: dict[ReplicaKey, SequenceTracker] = {}
        self._is_running = False
        self.num_replays = 0
        """Replay requests made (each a gap)."""

    def update(self, config: KvRoutingConfig) -> None:
        """Follow the sources ``config`` names from now on (a reload): new ones start, gone ones stop."""
        self._wanted = {
            (pool, label): _Follow(source, pool_config)
            for pool, pool_config in config.pools.items()
            if pool_config.enabled
            for label, source in pool_config.replicas.items()
        }
        self.index.retain(self._wanted)
        if self._is_running:
            self._sync()

    def start(self) -> None:
        """Start following (the app's startup); idempotent."""
        self._is_running = True
        self._sync()

    async def stop(self) -> None:
        """Stop every task and close every socket (the app's shutdown)."""
        self._is_running = False
        tasks = [task for _, task in self._tasks.values()] + list(self._stopping)
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._context is not None:
            self._context.destroy(linger=0)  # closes what is left: term() alone would wait for it
            self._context = None

    def is_following(self, key: ReplicaKey) -> bool:
        return key in self._tasks and not self._tasks[key][1].done()

    def _sync(self) -> None:
        """A task per wanted source; a source that moved (or went) stops, and its sequence with it. A
        change of scoring only is read by the running task (``_wanted``): no resubscription."""
        for key, (source, task) in list(self._tasks.items()):
            wanted = self._wanted.get(key)
            if wanted is None or wanted.source != source:
                task.cancel()
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
                del self._tasks[key]
                self._sequences.pop(key, None)
        for key, follow in self._wanted.items():
            if key not in self._tasks:
                task = asyncio.create_task(
                    self._follow(key, follow.source), name=f"kv-events {key[0]}/{key[1]}"
                )
                self._tasks[key] = (follow.source, task)

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        if self._socket_factory is not None:
            return self._socket_factory(kind)
        if self._context is None:
            self._context = zmq.asyncio.Context()
        return self._context.socket(kind)

    async def _follow(self, key: ReplicaKey, source: KvEventSource) -> None:
        sub = self._socket(zmq.SUB)
        try:
            sub.setsockopt(zmq.SUBSCRIBE, source.topic.encode())
            sub.connect(source.endpoint)
            while True:
                frames = await sub.recv_multipart()
                if len(frames) < 3:
                    logger.warning("kv events of %s/%s: a message of %d frames", *key, len(frames))
                    continue
                follow = self._wanted.get(key)
                if follow is None:
                    return
                try:
                    await self.receive(
                        key, follow, int.from_bytes(frames[-2], "big", signed=True), frames[-1]
                    )
                except Exception:  # a bug must not end the replica's stream: what it held is unsure now
                    logger.exception("kv events of %s/%s: a batch failed, blocks forgotten", *key)
                    self.index.forget(key)
                    self._sequences.pop(key, None)
        except zmq.ZMQError as e:
            logger.warning("kv events of %s/%s stopped: %s", *key, e)
        finally:
            sub.close(linger=0)

    async def receive(self, key: ReplicaKey, follow: _Follow, seq: int, payload: bytes) -> None:
        """One live message of ``key``'s (the SUB loop's body, callable by tests)."""
        tracker = self._sequences.setdefault(key, SequenceTracker())
        if tracker.last is not None and not self.index.is_live(key):  # forgotten (stale): join afresh
            tracker.last = tracker.repeat_floor = None
        verdict = tracker.classify(seq)
        if verdict == "next":
            tracker.repeat_floor = None  # the live stream is ahead of any replay again
        elif verdict == "first" and seq > 0 and follow.source.replay_endpoint is not None:
            # joining a running engine: its replay buffer tells what it cached before we listened
            tracker.repeat_floor = seq
            await self._replay(key, follow, tracker, 0, seq)
            verdict = tracker.classify(seq)
            if verdict == "gap":  # the buffer did not reach this message: start from it alone
                self.index.forget(key)
                tracker.last, verdict = None, "first"
        if verdict == "repeat":
            self.index.touch(key)
            return
        if verdict == "restart":
            logger.info("kv events of %s/%s: the sequence started again, the engine restarted", *key)
            self.index.forget(key)
        elif verdict == "gap":
            assert tracker.last is not None
            missing_from = tracker.last + 1
            tracker.repeat_floor = seq
            if not await self._replay(key, follow, tracker, missing_from, seq):
                logger.info("kv events of %s/%s: %d..%d lost, blocks forgotten", *key, missing_from, seq - 1)
                self.index.forget(key)
            elif tracker.classify(seq) == "repeat":  # the replay delivered this one too
                return
        self._apply(key, follow, tracker, seq, payload)

    def _apply(
        self, key: ReplicaKey, follow: _Follow, tracker: SequenceTracker, seq: int, payload: bytes
    ) -> None:
        tracker.last = seq
        try:
            batch = decode_batch(payload)
        except EventDecodeError as e:  # what it said is lost: as a gap that cannot be filled
            logger.warning("kv events of %s/%s: undecodable batch %d: %s", *key, seq, e)
            self.index.forget(key)
            return
        config = follow.config
        self.index.apply(
            key, batch, max_blocks=config.max_blocks_per_replica, stale_after_s=config.stale_after_s
        )

    async def _replay(
        self, key: ReplicaKey, follow: _Follow, tracker: SequenceTracker, start: int, until: int
    ) -> bool:
        """Ask the engine for ``start..until-1``; True when the tracker reached ``until - 1``."""
        if follow.source.replay_endpoint is None:
            return False
        self.num_replays += 1
        dealer = self._socket(zmq.DEALER)
        try:
            dealer.connect(follow.source.replay_endpoint)
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            async with asyncio.timeout(follow.config.replay_timeout_s):
                while True:
                    frames = await dealer.recv_multipart()
                    if len(frames) < 2:
                        return False
                    seq = int.from_bytes(frames[-2], "big", signed=True)
                    if seq == _END_OF_REPLAY:
                        break
                    verdict = tracker.classify(seq)
                    if verdict in ("first", "next"):
                        self._apply(key, follow, tracker, seq, frames[-1])
                    elif verdict != "repeat":  # the buffer starts past what is missing
                        return False
        except (TimeoutError, zmq.ZMQError):
            return False
        finally:
            dealer.close(linger=0)
        return tracker.last is not None and tracker.last >= until - 1
