"""The asyncio front: one background thread runs ``LLMEngine.step()``; each request gets an asyncio queue.

Engine state is touched only by that thread. Callers validate and tokenize on their own thread (pure),
then hand the request over through a command queue, so the event loop never waits for a step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

from backends.engine.errors import EngineDeadError, EngineStopped, QueueFullError
from backends.engine.llm_engine import LLMEngine
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.engine.stats import EngineStats

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    cache_salt: str | None
    priority: int
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[RequestOutput | BaseException]


@dataclass
class _Abort:
    request_id: str
    add: _Add
    """Only this submission is aborted, never a later request that reuses the id."""


class AsyncLLMEngine:
    """Runs LLMEngine.step() in one background thread; per-request asyncio queues."""

    def __init__(
        self, engine: LLMEngine, *, max_waiting: int = 256, step_lock: threading.Lock | None = None
    ) -> None:
        """``step_lock``: held for each step, shared by the engines of one process so their steps take
        turns on the cores instead of splitting them (two forwards at once each run at half speed, and
        oversubscribed threads make both slower still)."""
        self.engine = engine
        self.max_waiting = max_waiting
        self._step_lock = step_lock or contextlib.nullcontext()
        self._commands: queue.SimpleQueue[_Add | _Abort | None] = queue.SimpleQueue()
        self._streams: dict[str, _Add] = {}  # owned by the step thread
        # submitted minus admitted = requests not yet handed to the engine; each counter has one writer
        self._num_submitted = 0  # written by callers (the event loop)
        self._num_admitted = 0  # written by the step thread
        self._thread: threading.Thread | None = None
        self._is_stopping = False
        """``stop`` was called: new requests are refused with ``EngineStopped``."""
        self._dead: BaseException | None = None
        self._stats = engine.stats()

    async def start(self) -> None:
        if self._thread is not None:
            return
        self._is_stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine-step", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """End the step loop after its current step; every open stream then raises ``EngineStopped``.

        Idempotent, and a call made while another one waits also waits for the thread: the server stops
        the engines before its graceful-shutdown timeout and its lifespan stops them again, and the
        parallel workers may only be closed once the step thread is done with them.
        """
        thread = self._thread
        if thread is None:
            return
        if not self._is_stopping:
            self._is_stopping = True
            self._commands.put(None)
        await asyncio.to_thread(thread.join)
        if self._thread is thread:
            self._thread = None

    def stats(self) -> EngineStats:
        return self._stats

    def generate(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        """Validate and submit now (ValueError, QueueFullError, EngineDeadError raise at once).

        The returned iterator yields cumulative outputs; leaving it early (break, cancel, or dropping it
        unstarted) aborts the request.
        """
        if self._dead is not None:
            raise EngineDeadError(f"engine stopped after an error: {self._dead}")
        if self._is_stopping:
            raise EngineStopped("engine stopped")
        if self._thread is None:
            raise EngineDeadError("engine is not started")
        ids = self.engine.tokenize_prompt(prompt, params)
        num_pending = self._num_submitted - self._num_admitted
        if self._stats.num_waiting + num_pending >= self.max_waiting:
            raise QueueFullError(f"{self.max_waiting} requests are already waiting; retry later")
        add = _Add(request_id, ids, params, cache_salt, priority, asyncio.get_running_loop(), asyncio.Queue())
        self._num_submitted += 1
        self._commands.put(add)
        stream = self._stream(add)
        weakref.finalize(stream, self._commands.put, _Abort(request_id, add))
        return stream

    async def _stream(self, add: _Add) -> AsyncIterator[RequestOutput]:
        finished = False
        try:
            while True:
                item = await add.out.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:  # the consumer went away (break, cancel, disconnect): free its KV now
                self._commands.put(_Abort(add.request_id, add))

    # -- the step thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        engine = self.engine
        try:
            while True:
                block = not engine.has_unfinished_requests()
                if not self._drain_commands(block=block):
                    self._fail_streams(EngineStopped("engine stopped"))
                    return
                outputs: list[RequestOutput] = []
                if engine.has_unfinished_requests():
                    with self._step_lock:
                        outputs = engine.step()
                # publish the counts before delivering: a caller who sees a token also sees its request
                # counted as running, not as still waiting (which would refuse the next one early)
                self._stats = engine.stats()
                self._deliver(outputs)
        except BaseException as exc:
            log.exception("engine step thread died")
            self._dead = exc
            self._fail_streams(EngineDeadError(f"engine step failed: {type(exc).__name__}: {exc}"))

    def _fail_streams(self, error: EngineDeadError) -> None:
        for add in list(self._streams.values()):
            self.engine.abort_request(add.request_id)
            try:
                add.loop.call_soon_threadsafe(add.out.put_nowait, error)
            except RuntimeError:  # that caller's loop is already closed
                pass
        self._streams.clear()

    def _drain_commands(self, *, block: bool) -> bool:
        """Apply queued adds and aborts; False when asked to stop."""
        while True:
            try:
                cmd = self._commands.get(block=block, timeout=None)
            except queue.Empty:
                return True
            block = False
            if cmd is None:
                return False
            if isinstance(cmd, _Abort):
                if self._streams.get(cmd.request_id) is cmd.add:
                    del self._streams[cmd.request_id]
                    self.engine.abort_request(cmd.request_id)
                continue
            try:
                self.engine.add_request(
                    cmd.request_id,
                    cmd.prompt_token_ids,
                    cmd.params,
                    cache_salt=cmd.cache_salt,
                    priority=cmd.priority,
                )
            except ValueError as exc:  # e.g. a duplicate request id
                self._num_admitted += 1
                cmd.loop.call_soon_threadsafe(cmd.out.put_nowait, exc)
                continue
            self._streams[cmd.request_id] = cmd
            # publish the new waiting count before un-counting it as pending: callers may over-count
            # for a moment, never under-count
            self._stats = self.engine.stats()
            self._num_admitted += 1

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        """Hand a step's outputs to their streams: one wake-up of each caller's event loop per step, not
        one per output (64 cross-thread wake-ups a step had the loop's thread preempting the engine's
        worker threads, and a parallel region waits for its slowest thread)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Add, RequestOutput]]] = {}
        for output in outputs:
            add = self._streams.get(output.request_id)
            if add is None:
                continue
            if output.finished:
                del self._streams[output.request_id]
            by_loop.setdefault(add.loop, []).append((add, output))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, [(add.out, output) for add, output in items])
            except RuntimeError:  # the callers' loop is closed: nobody listens any more
                for add, _ in items:
                    self._streams.pop(add.request_id, None)
                    self.engine.abort_request(add.request_id)


def _put_all(items: list[tuple[asyncio.Queue[RequestOutput | BaseException], RequestOutput]]) -> None:
    for out, output in items:
        out.put_nowait(output)
