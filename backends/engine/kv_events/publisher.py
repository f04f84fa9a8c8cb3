"""The KV-event publisher: a step's events become one batch, sent by a background thread over ZeroMQ.

The wire is vLLM's ``ZmqEventPublisher``'s, so its subscribers work unchanged:

* PUB socket: every batch is a 3-frame message ``(topic, seq, payload)``: ``seq`` an 8-byte big-endian
  counter from 0 (per publisher: a restart starts again at 0), ``payload`` the MessagePack of a
  ``KVEventBatch``.
* ROUTER replay socket: a subscriber that saw a gap sends ``(b"", start_seq)`` from a DEALER (the ROUTER
  adds its identity) and gets every buffered ``(seq, payload)`` with ``seq >= start_seq``, then
  ``(-1 as 8 signed bytes, b"")``. The buffer keeps the last ``buffer_steps`` batches.

The engine's step only appends to a list and, at its end, puts one batch on a queue (dropped, never
waited on, when the queue is full): encoding and the network live on the thread, which alone touches
the sockets.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import zmq

from backends.engine.kv_events.config import KVEventsConfig
from backends.engine.kv_events.events import AllBlocksCleared, BlockRemoved, KVEvent, KVEventBatch

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)
"""The replay's last message carries this seq (and an empty payload)."""
_POLL_S = 0.05
"""How long the thread waits for a batch before it looks at the replay socket again."""
_LINGER_MS = 100
"""How long a closing socket still tries to deliver what it holds (a clean stop sends its last batch)."""


class NullEventPublisher:
    """Events off: nothing recorded, nothing sent (the engine calls ``flush`` and ``close`` anyway)."""

    def record(self, event: KVEvent) -> None:
        return

    def flush(self) -> None:
        return

    def close(self) -> None:
        return


class ZmqEventPublisher:
    """Collects a step's events (``record``), publishes them as one batch (``flush``), replays missed ones.

    ``record`` and ``flush`` run on the engine's thread; the sockets are the publisher thread's own.
    ``context``: the ZeroMQ context (default the process's shared one); ``clock``: a batch's ``ts``.
    """

    def __init__(
        self,
        config: KVEventsConfig,
        *,
        context: zmq.Context[Any] | None = None,
        clock: Callable[[], float] = time.time,
        data_parallel_rank: int = 0,
    ) -> None:
        self.config = config
        self._clock = clock
        self._data_parallel_rank = data_parallel_rank
        self._topic = config.topic.encode()
        self._pending: list[KVEvent] = []
        self._queue: queue.Queue[KVEventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._replay_buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self.num_dropped_batches = 0
        """Batches dropped because the queue to the thread was full (the subscribers see a seq gap)."""
        self.num_published_batches = 0
        ctx = context or zmq.Context.instance()
        self._pub = ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._replay: zmq.Socket[Any] | None = None
        try:
            if _is_bind_address(config.endpoint):
                self._pub.bind(config.endpoint)
            else:
                self._pub.connect(config.endpoint)
            self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT) or config.endpoint
            """The address actually bound (a ``*`` port resolved), or the one connected to."""
            self.replay_endpoint: str | None = None
            if config.replay_endpoint is not None:
                self._replay = ctx.socket(zmq.ROUTER)
                self._replay.bind(config.replay_endpoint)
                self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError:
            self._close_sockets()
            raise
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()
        log.info("publishing KV-cache events on %s (replay %s)", self.endpoint, self.replay_endpoint)

    # -- the engine's thread -------------------------------------------------------------------------
    def record(self, event: KVEvent) -> None:
        """Add one event to the current step's batch (consecutive evictions of a group share one event)."""
        last = self._pending[-1] if self._pending else None
        if (
            isinstance(event, BlockRemoved)
            and isinstance(last, BlockRemoved)
            and last.group_idx == event.group_idx
        ):
            last.block_hashes.extend(event.block_hashes)
        elif not (isinstance(event, AllBlocksCleared) and isinstance(last, AllBlocksCleared)):
            self._pending.append(event)

    def flush(self) -> None:
        """End of a step: hand its events, if any, to the thread as one batch."""
        if not self._pending:
            return
        batch = KVEventBatch(self._clock(), self._pending, data_parallel_rank=self._data_parallel_rank)
        self._pending = []
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.num_dropped_batches += 1
            log.warning("KV-event queue full: a batch dropped (%d so far)", self.num_dropped_batches)

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is queued, stop the thread and close the sockets (idempotent)."""
        if not self._thread.is_alive():
            return
        self.flush()
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.warning("KV-event queue still full at close: the unsent batches are lost")
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("the KV-event thread did not stop within %.1f s", timeout_s)

    # -- the publisher thread ------------------------------------------------------------------------
    def _run(self) -> None:
        encoder = msgspec.msgpack.Encoder()
        seq = 0
        try:
            while True:
                if self._replay is not None and self._replay.poll(0):
                    self._serve_replay()
                try:
                    batch = self._queue.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if batch is None:  # close()
                    return
                payload = encoder.encode(batch)
                seq_bytes = seq.to_bytes(8, "big")
                try:
                    self._pub.send_multipart((self._topic, seq_bytes, payload))
                except zmq.ZMQError:
                    log.exception("KV-event batch %d not sent", seq)
                self._replay_buffer.append((seq, payload))
                self.num_published_batches += 1
                seq += 1
        finally:
            self._close_sockets()

    def _serve_replay(self) -> None:
        """Answer one replay request: the buffered batches from its start seq, then the end marker."""
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            log.warning("malformed KV-event replay request (%d frames)", len(frames))
            return
        client, _, start = frames
        start_seq = int.from_bytes(start, "big")
        for seq, payload in list(self._replay_buffer):
            if seq >= start_seq:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))

    def _close_sockets(self) -> None:
        self._pub.close(linger=_LINGER_MS)
        if self._replay is not None:
            self._replay.close(linger=_LINGER_MS)


def _is_bind_address(endpoint: str) -> bool:
    """vLLM's rule: a wildcard or a local transport is bound, a concrete host is connected to."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def build_publisher(config: KVEventsConfig | None, blocks: Any) -> ZmqEventPublisher | NullEventPublisher:
    """The engine's publisher (a null one when events are off), wired as the event sink of every block
    pool of ``blocks`` (one ``BlockManager``, or ``KVGroups``' full and sliding pools as groups 0 and 1)."""
    if config is None or not config.is_enabled:
        return NullEventPublisher()
    publisher = ZmqEventPublisher(config)
    for group_idx, pool in enumerate(getattr(blocks, "groups", (blocks,))):
        pool.attach_event_sink(publisher, group_idx=group_idx)
    return publisher
