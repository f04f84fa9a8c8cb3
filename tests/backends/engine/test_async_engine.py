"""AsyncLLMEngine: streaming, errors at call time, queue limits, abort on cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.errors import EngineStopped, QueueFullError
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory


@pytest.fixture
async def async_engine(make_engine: EngineFactory) -> AsyncIterator[AsyncLLMEngine]:
    engine = AsyncLLMEngine(make_engine())
    await engine.start()
    yield engine
    await engine.stop()


async def collect(stream: AsyncIterator[RequestOutput]) -> list[RequestOutput]:
    return [out async for out in stream]


async def test_streams_cumulative_outputs(async_engine: AsyncLLMEngine) -> None:
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    outs = await collect(async_engine.generate("a", "hello", params))
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2, 3, 4, 5]
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "length"
    await async_engine.stop()  # the engine is single-threaded: stop the step thread before using it here
    sync = async_engine.engine.generate(["hello"], params)[0]
    assert outs[-1].outputs[0].token_ids == sync.outputs[0].token_ids


async def test_concurrent_requests(async_engine: AsyncLLMEngine) -> None:
    params = SamplingParams(max_tokens=6, ignore_eos=True, seed=1)
    results = await asyncio.gather(
        *(collect(async_engine.generate(f"r{i}", [i + 1] * (i + 2), params)) for i in range(8))
    )
    assert all(r[-1].finished and len(r[-1].outputs[0].token_ids) == 6 for r in results)


async def test_bad_input_raises_at_call(async_engine: AsyncLLMEngine) -> None:
    with pytest.raises(ValueError, match="top_p"):
        async_engine.generate("bad", "x", SamplingParams(top_p=2))


async def test_queue_full_raises_at_once(make_engine: EngineFactory) -> None:
    engine = AsyncLLMEngine(make_engine(max_num_seqs=1), max_waiting=2)
    await engine.start()
    try:
        params = SamplingParams(max_tokens=10_000, ignore_eos=True)
        running = engine.generate("a", "x", params)
        await running.__anext__()
        waiting = [engine.generate("b", "x", params), engine.generate("c", "x", params)]
        with pytest.raises(QueueFullError):
            engine.generate("d", "x", params)
        for stream in [running, *waiting]:
            await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await engine.stop()


async def test_consumer_leaving_aborts_the_request(async_engine: AsyncLLMEngine) -> None:
    stream = async_engine.generate("long", "x", SamplingParams(max_tokens=10_000, ignore_eos=True))
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    for _ in range(1500):  # up to 30 s on a busy machine; done after one step
        await asyncio.sleep(0.02)
        if async_engine.stats().num_running == 0 and not async_engine.engine.has_unfinished_requests():
            break
    assert not async_engine.engine.has_unfinished_requests()


async def test_cancelled_task_aborts_the_request(async_engine: AsyncLLMEngine) -> None:
    task = asyncio.create_task(
        collect(async_engine.generate("c", "x", SamplingParams(max_tokens=10_000, ignore_eos=True)))
    )
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(1500):  # up to 30 s on a busy machine; done after one step
        await asyncio.sleep(0.02)
        if not async_engine.engine.has_unfinished_requests():
            break
    assert not async_engine.engine.has_unfinished_requests()


async def test_duplicate_request_id_fails_that_stream(async_engine: AsyncLLMEngine) -> None:
    params = SamplingParams(max_tokens=50, ignore_eos=True)
    first = async_engine.generate("same", "x", params)
    await first.__anext__()
    with pytest.raises(ValueError, match="already"):
        await collect(async_engine.generate("same", "x", params))
    await first.aclose()  # type: ignore[attr-defined]


async def test_dropped_unstarted_stream_is_aborted(async_engine: AsyncLLMEngine) -> None:
    import gc

    async_engine.generate("dropped", "x", SamplingParams(max_tokens=10_000, ignore_eos=True))
    gc.collect()
    for _ in range(1500):  # up to 30 s on a busy machine; done after one step
        await asyncio.sleep(0.02)
        if not async_engine.engine.has_unfinished_requests():
            break
    assert not async_engine.engine.has_unfinished_requests()


async def test_stop_fails_open_streams(make_engine: EngineFactory) -> None:
    """Stopping (the server shuts down) ends every open stream with ``EngineStopped``, which the server
    answers with a 503 rather than the 500 of an engine that failed; later requests are refused alike."""
    engine = AsyncLLMEngine(make_engine())
    await engine.start()
    stream = engine.generate("s", "x", SamplingParams(max_tokens=10_000, ignore_eos=True))
    await stream.__anext__()
    await engine.stop()
    with pytest.raises(EngineStopped, match="engine stopped"):
        async for _ in stream:
            pass
    assert not engine.engine.has_unfinished_requests()
    with pytest.raises(EngineStopped):
        engine.generate("t", "x", SamplingParams())


async def test_a_second_stop_waits_for_the_step_thread(make_engine: EngineFactory) -> None:
    """The server stops the engines before its shutdown timeout and the lifespan stops them again: the
    second call must not return while the step thread may still use the engine (its workers close next)."""
    engine = AsyncLLMEngine(make_engine())
    await engine.start()
    stream = engine.generate("s", "x", SamplingParams(max_tokens=10_000, ignore_eos=True))
    await stream.__anext__()
    thread = engine._thread
    assert thread is not None
    first = asyncio.create_task(engine.stop())
    await asyncio.sleep(0)  # the first call has asked the thread to stop and waits for it
    await engine.stop()
    assert not thread.is_alive()
    await first
    with pytest.raises(EngineStopped):
        async for _ in stream:
            pass
    await engine.start()  # a stopped engine starts again
    outs = await collect(engine.generate("again", "x", SamplingParams(max_tokens=2, ignore_eos=True)))
    assert outs[-1].finished
    await engine.stop()
