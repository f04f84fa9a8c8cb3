"""``BatchRunner``: each gateway process's background worker for batches, started and stopped with the
app.

Every ``poll_interval_s``, and as soon as a line ends or a batch is made or cancelled here, it walks
the active batches::

    finalize when due (every line answered, the window past, or a cancel with nothing in flight):
    one gateway wins and writes the files
    -> claim as many lines as this process has room for (``batches.concurrency``)
    -> run each as a request (``lifecycle.live`` with a ``BatchExchange``) -> record its result once,
       or hand it back to run later (a 429 or 503: the batch pauses here for the Retry-After)

Stopping cancels the lines in flight and hands them back, so another gateway (or this one, restarted)
claims them at once; a process that dies holds its lines until their lease ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

import msgspec

from gateway.batches.exchange import BatchExchange
from gateway.batches.jsonl import BatchLine
from gateway.batches.metrics import BatchMetrics
from gateway.batches.records import FINAL_STATUSES, StoredBatch
from gateway.batches.service import BatchService
from gateway.lifecycle import Observer, live
from gateway.redis_client.resp import RespError

if TYPE_CHECKING:
    from gateway.instance import Gateway

__all__ = ["BatchRunner"]

logger = logging.getLogger("sortyard.batches")
_STORE_ERRORS = (OSError, TimeoutError, RespError)
_decode_line = msgspec.json.Decoder(BatchLine).decode
_encode = msgspec.json.encode


class BatchRunner:
    """Claims and runs batch lines for this process; ``start()`` in the app's startup, ``await stop()``
    first thing in its shutdown."""

    def __init__(
        self,
        gateway: Gateway,
        service: BatchService,
        observer: Observer | None = None,
        metrics: BatchMetrics | None = None,
    ) -> None:
        self.gateway = gateway
        self.service = service
        self.metrics = metrics or BatchMetrics(None)
        self.observer = observer
        """Spans and access-log lines of batch lines (None: none)."""
        self.in_flight: dict[asyncio.Task[None], tuple[str, int]] = {}
        """Lines running here -> (batch, line)."""
        self.priorities: deque[int | None] = deque(maxlen=1000)
        """The priority class each line ran in, as its ``Call`` carried it (the latest 1,000)."""
        self._paused_until: dict[str, float] = {}  # batch -> monotonic time: a 429 said wait
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._is_stopping = False

    def start(self) -> None:
        if self._task is None:
            self._is_stopping = False
            self._task = asyncio.get_running_loop().create_task(self._run(), name="batch-runner")

    def wake(self) -> None:
        """Walk the batches now (one was made or cancelled), not at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop claiming; the lines in flight are cancelled and handed back for another to run."""
        task, self._task = self._task, None
        if task is not None:  # the walk in progress ends (a claim cut off mid-way would hold its lines)
            self._is_stopping = True
            self._wake.set()
            await asyncio.gather(task, return_exceptions=True)
        lines = list(self.in_flight)
        for line in lines:
            line.cancel()
        await asyncio.gather(*lines, return_exceptions=True)

    async def _run(self) -> None:
        while not self._is_stopping:
            try:
                await self.tick()
            except _STORE_ERRORS as error:  # tried again next time
                logger.warning("batch store unavailable: %r", error)
            except Exception:  # a bug: logged, tried again next time
                logger.exception("batch runner tick failed")
            interval = self.gateway.policy.batches.poll_interval_s
            try:
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    async def tick(self) -> None:
        """One walk over the active batches: finalize what is due, claim and start what fits."""
        state, config = self.service.state, self.gateway.policy.batches
        for batch_id in await state.active():
            batch = await state.get(batch_id)
            if batch is None or batch.status in FINAL_STATUSES:
                await state.forget(batch_id)  # over (its finisher stopped before this)
                self._paused_until.pop(batch_id, None)
                continue
            if await self.service.finalize(batch, config.lease_s) is not None:
                self._paused_until.pop(batch_id, None)
                continue
            if self._is_stopping:
                return
            room = config.concurrency - len(self.in_flight)
            if room <= 0 or self._paused_until.get(batch_id, 0.0) > time.monotonic():
                continue
            claimed = await state.claim(batch_id, self.service.clock(), config.lease_s, room)
            for index, encoded in claimed:
                line = asyncio.get_running_loop().create_task(self._run_line(batch, index, encoded))
                self.in_flight[line] = (batch_id, index)
                line.add_done_callback(self._line_done)

    def _line_done(self, line: asyncio.Task[None]) -> None:
        self.in_flight.pop(line, None)
        self._wake.set()  # room for another line, and maybe the batch is done

    async def _run_line(self, batch: StoredBatch, index: int, encoded: bytes) -> None:
        batch_id, state = batch.doc.id, self.service.state
        exchange = BatchExchange(
            self.gateway, batch.doc.endpoint, batch.doc.key_sha256, _decode_line(encoded)
        )
        try:
            await live(self.gateway, self.observer, exchange)
        except asyncio.CancelledError:  # stopping: the line goes back, to be claimed at once
            self.metrics.count_line("handed_back")
            await self._release(batch_id, index, 0.0)
            raise
        self.priorities.append(exchange.priority)
        if exchange.result is None:  # wait, then run it again (this process pauses the batch)
            wait = exchange.retry_after_s or 1.0
            self._paused_until[batch_id] = time.monotonic() + wait
            self.metrics.count_line("retried")
            await self._release(batch_id, index, wait)
            return
        try:
            written = await state.record(batch_id, index, _encode(exchange.result), exchange.result.is_ok)
        except _STORE_ERRORS as error:  # not recorded: the line runs again once its lease ends
            self.metrics.count_line("unrecorded")
            logger.warning("batch line result not recorded: %r", error)
        else:  # not written: the line already had a result (its lease ran out here, another ran it)
            self.metrics.count_line("recorded" if written else "already_recorded")

    async def _release(self, batch_id: str, index: int, wait_s: float) -> None:
        try:
            await self.service.state.release(batch_id, index, self.service.clock() + wait_s)
        except _STORE_ERRORS as error:  # still claimed: claimable again once its lease ends
            logger.warning("batch line not handed back: %r", error)
