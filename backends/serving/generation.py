"""One engine request as the server sees it: opened, iterated with timing, closed (which aborts it).

The first output is awaited before any response header is sent, so a full queue or a bad input is still
an HTTP status (429, 400) rather than an error inside a 200 stream. ``until_disconnect`` aborts the
request when the client hangs up while the server is still waiting (before a stream starts, or for the
whole of a non-streamed request); once a stream runs, Litestar cancels it on disconnect and the stream's
``finally`` closes the generation. An engine stopped by the server's shutdown ends its requests with a
503 ``model_not_ready`` (an error event mid-stream), never a 500: nothing failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio

from backends.engine.errors import EngineDeadError, EngineStopped, PromptTooLong, QueueFullError
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.errors import (
    ClientDisconnected,
    ContextLengthExceeded,
    EngineFailed,
    InvalidRequest,
    NotReady,
    QueueFull,
)
from backends.serving.metrics import ModelMetrics
from backends.serving.tracing import RequestTrace

T = TypeVar("T")
Receive = Callable[[], Awaitable[Any]]


class Generation:
    """One request to the engine: ``open()`` waits for its first output, iterating yields the rest.

    Records the request's TTFT, inter-token and end-to-end latencies into ``metrics`` as it goes.
    """

    def __init__(
        self,
        engine: AsyncEngineLike,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        metrics: ModelMetrics,
        cache_salt: str | None = None,
        priority: int = 0,
        arrival_s: float | None = None,
        trace: RequestTrace | None = None,
    ) -> None:
        self.request_id = request_id
        self.params = params
        self._engine = engine
        self._prompt_token_ids = prompt_token_ids
        self._cache_salt = cache_salt
        self._priority = priority
        self._metrics = metrics
        self._arrival_s = time.perf_counter() if arrival_s is None else arrival_s
        self._outputs: AsyncIterator[RequestOutput] | None = None
        self._first: RequestOutput | None = None
        self._last_token_s = 0.0
        self._num_tokens = 0
        self._is_done = False
        self._trace = trace
        self._last: RequestOutput | None = None

    async def open(self) -> RequestOutput:
        """Submit the request and wait for its first output; engine errors become HTTP errors."""
        if self._trace is not None:
            self._trace.submitted(time.perf_counter())
        try:
            self._outputs = self._engine.generate(
                self.request_id,
                self._prompt_token_ids,
                self.params,
                cache_salt=self._cache_salt,
                priority=self._priority,
            )
            first = await anext(self._outputs)
        except QueueFullError as exc:
            raise QueueFull() from exc
        except EngineStopped as exc:
            raise shutting_down() from exc
        except EngineDeadError as exc:
            raise NotReady(f"The engine is not running: {exc}") from exc
        except PromptTooLong as exc:  # past the checks on the context: the whole KV cache is smaller
            raise ContextLengthExceeded(f"This server cannot hold the request: {exc}.") from exc
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        except StopAsyncIteration as exc:
            raise EngineFailed("The engine returned no output.") from exc
        self._observe(first)
        self._first = first
        return first

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        """Every output from the first on (cumulative, as the engine hands them)."""
        if self._first is None:
            await self.open()
        assert self._first is not None and self._outputs is not None
        yield self._first
        if self._first.finished:
            return
        try:
            async for output in self._outputs:
                self._observe(output)
                yield output
                if output.finished:
                    return
        except EngineStopped as exc:  # the server shuts down: retry elsewhere, as before the stream began
            raise shutting_down() from exc
        except EngineDeadError as exc:
            raise EngineFailed(f"The engine stopped: {exc}") from exc

    async def aclose(self) -> None:
        """Close the engine's iterator, which aborts the request if it is still running."""
        outputs, self._outputs = self._outputs, None
        if self._trace is not None:  # ends the request's trace however it ended (no-op when finished)
            self._trace.finish(self._last, model=self._model_name())
        close = getattr(outputs, "aclose", None)
        if close is not None:
            # shielded: this runs in the `finally` of a stream that anyio has just cancelled
            with anyio.CancelScope(shield=True):
                await close()

    def _observe(self, output: RequestOutput) -> None:
        now = time.perf_counter()
        num_tokens = sum(len(c.token_ids) for c in output.outputs)
        num_new = num_tokens - self._num_tokens
        if num_new > 0:
            if self._num_tokens == 0:
                self._metrics.observe_first_token(now - self._arrival_s)
            else:
                self._metrics.observe_inter_token((now - self._last_token_s) / num_new, num_new)
            self._num_tokens = num_tokens
            self._last_token_s = now
            if self._trace is not None:
                self._trace.token(now)
        self._last = output
        if output.finished and not self._is_done:
            self._is_done = True
            reason = output.outputs[0].finish_reason if output.outputs else None
            self._metrics.observe_finished(now - self._arrival_s, reason or "stop")
            if self._trace is not None:
                self._trace.finish(output, model=self._model_name())

    def _model_name(self) -> str | None:
        return getattr(self._metrics, "model_name", None)


def shutting_down() -> NotReady:
    """The error of a request the engine's stop ended (the server shuts down): 503 with Retry-After,
    not 500, because nothing failed and another replica (or this one, restarted) can serve it."""
    return NotReady("The server is shutting down; retry the request.")


async def last_output(generation: Generation) -> RequestOutput:
    """Iterate a generation to its end; its final (cumulative) output."""
    last: RequestOutput | None = None
    async for output in generation:
        last = output
    if last is None:
        raise EngineFailed("The engine returned no output.")
    return last


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first; then cancel it and raise ClientDisconnected.

    Call only after the request body has been read: the next ASGI message is then ``http.disconnect``.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientDisconnected("The client disconnected.")
    return task.result()


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
