"""An engine's KV-event publisher in miniature, for the gateway's KV-routing tests.

``batch(...)`` encodes a ``KVEventBatch`` as vLLM does, in either shape: ``map`` (tagged maps, today's
vLLM) or ``array`` (tagged arrays, older releases). ``KvPublisher`` binds a PUB socket and a ROUTER
replay socket on loopback ports and keeps every batch it published, so a test can drop one on the
wire (``drop=True``) and see the subscriber fill the gap from the replay socket::

    async with KvPublisher(context) as publisher:
        await publisher.publish([stored([1], None, range(16), 16)])
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Literal

import msgspec
import zmq
import zmq.asyncio

Shape = Literal["map", "array"]
END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)


def stored(
    hashes: Iterable[Any],
    parent: Any,
    token_ids: Iterable[int],
    block_size: int,
    *,
    medium: str | None = "GPU",
    lora_name: str | None = None,
    extra_keys: list[Any] | None = None,
) -> dict[str, Any]:
    """A ``BlockStored`` event's fields (encoded by :func:`batch`); ``extra_keys`` per block, as vLLM
    sends them (``[["salt"], None, ...]``), only when given."""
    event = {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "parent_block_hash": parent,
        "token_ids": list(token_ids),
        "block_size": block_size,
        "lora_id": None,
        "medium": medium,
        "lora_name": lora_name,
    }
    if extra_keys is not None:
        event["extra_keys"] = extra_keys
    return event


def removed(hashes: Iterable[Any], *, medium: str | None = "GPU") -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium}


def cleared() -> dict[str, Any]:
    return {"type": "AllBlocksCleared"}


def batch(events: list[dict[str, Any]], *, shape: Shape = "map", ts: float = 1.0, rank: int = 0) -> bytes:
    """msgpack of ``KVEventBatch(ts, events, data_parallel_rank)`` in vLLM's map or array shape."""
    if shape == "map":
        return msgspec.msgpack.encode({"ts": ts, "events": events, "data_parallel_rank": rank})
    arrays = [[event["type"], *(v for k, v in event.items() if k != "type")] for event in events]
    return msgspec.msgpack.encode([ts, arrays, rank])


class KvPublisher:
    """A PUB socket plus a ROUTER replay socket on loopback, numbering batches from ``first_seq``."""

    def __init__(
        self,
        context: zmq.asyncio.Context,
        *,
        topic: bytes = b"",
        with_replay: bool = True,
        shape: Shape = "map",
    ) -> None:
        self.context = context
        self.topic = topic
        self.shape = shape
        self.next_seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.pub = context.socket(zmq.PUB)
        self.router = context.socket(zmq.ROUTER) if with_replay else None
        self.endpoint = ""
        self.replay_endpoint: str | None = None
        self.num_replays = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> KvPublisher:
        self.pub.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        if self.router is not None:
            self.router.bind("tcp://127.0.0.1:*")
            self.replay_endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
            self._task = asyncio.create_task(self._serve_replays())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.pub.close(linger=0)
        if self.router is not None:
            self.router.close(linger=0)

    async def publish(
        self, events: list[dict[str, Any]], *, drop: bool = False, raw: bytes | None = None
    ) -> int:
        """Publish one batch (``drop``: only into the replay buffer, as if lost on the wire; ``raw``:
        these bytes instead of the events'); its seq."""
        seq = self.next_seq
        self.next_seq += 1
        payload = batch(events, shape=self.shape) if raw is None else raw
        self.buffer.append((seq, payload))
        if not drop:
            await self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def restart(self) -> None:
        """As a restarted engine: numbering from 0 again, an empty replay buffer."""
        self.next_seq = 0
        self.buffer.clear()

    async def _serve_replays(self) -> None:
        assert self.router is not None
        while True:
            identity, _, start = await self.router.recv_multipart()
            self.num_replays += 1
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.router.send_multipart([identity, b"", seq.to_bytes(8, "big"), payload])
            await self.router.send_multipart([identity, b"", END_OF_REPLAY, b""])
