"""bench/server_workload.py: the report math, the streaming driver against a fake OpenAI server on
loopback, and the whole measurement against a fake server process and Sortyard's server with a tiny
model."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from harness.processes import ProcessSpec, free_port
from server_workload import (
    PeakSampler,
    RequestTiming,
    WorkloadError,
    completion_body,
    markdown_table,
    measure_server,
    percentile,
    run_workload,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]
BODIES = web.AppKey("bodies", list)
"""The request bodies the fake server received, in arrival order."""


# ------------------------------------------------------------------------------------------ report math


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert percentile([5.0], 0.5) == 5.0


def test_ttft_and_tpot_of_one_request() -> None:
    timing = RequestTiming(
        submitted_s=1.0, first_token_s=1.5, last_token_s=2.5, done_s=2.6, num_output_tokens=5
    )
    assert timing.ttft_s == pytest.approx(0.5)
    assert timing.tpot_s == pytest.approx(0.25)  # 1 s over the 4 tokens after the first
    assert RequestTiming(0.0, 0.1, 0.1, 0.2, 1).tpot_s is None


def test_summarize_measures_wall_from_first_submission_to_last_end() -> None:
    timings = [
        RequestTiming(0.0, 1.0, 3.0, 3.0, 5),  # TPOT 0.5 s
        RequestTiming(0.0, 2.0, 4.0, 4.0, 3),  # TPOT 1.0 s
        RequestTiming(0.0, 3.0, 3.0, 3.0, 1),  # no TPOT
        RequestTiming(0.0, 0.5, 1.5, 1.5, 3),  # TPOT 0.5 s
    ]
    report = summarize(timings, num_prompt_tokens=100)
    assert report["num_requests"] == 4
    assert report["output_tokens"] == 12
    assert report["wall_s"] == 4.0
    assert report["output_tok_s"] == 3.0
    assert report["total_tok_s"] == 28.0
    assert report["ttft_p50_s"] == 2.0  # nearest rank of [0.5, 1, 2, 3]
    assert report["ttft_p99_s"] == 3.0
    assert report["tpot_p50_ms"] == 500.0  # median of [500, 1000, 500]


def test_summarize_refuses_an_empty_run() -> None:
    with pytest.raises(WorkloadError):
        summarize([], num_prompt_tokens=0)


def test_the_request_asks_for_exact_greedy_streamed_tokens() -> None:
    body = completion_body("m", [5, 6, 7], 9)
    assert body["prompt"] == [5, 6, 7]
    assert body["max_tokens"] == 9
    assert body["ignore_eos"] is True
    assert body["temperature"] == 0
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_markdown_table_has_a_row_per_server() -> None:
    rows = [
        {"system": "a", "output_tok_s": 10.0, "wall_s": 2.0, "ttft_p50_s": 0.1, "ttft_p99_s": 0.2},
        {"system": "b", "output_tok_s": 5.0},
    ]
    lines = markdown_table(rows).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| a | 10.0 | 2.0 | 0.1 / 0.2 | - |")
    assert lines[3].startswith("| b | 5.0 | - | - / - |")


def test_peak_sampler_keeps_the_largest_reading() -> None:
    readings = iter([1.0, 7.0, 3.0])
    with PeakSampler(lambda: next(readings, 2.0), interval_s=0.001) as sampler:
        while sampler.peak < 7.0:
            pass
    assert sampler.peak == 7.0


# --------------------------------------------------------------------------------- a fake OpenAI server


def fake_app(
    num_expected: int, *, short_by: int = 0, status: int = 200, delay_s: float = 0.002
) -> web.Application:
    """``/v1/completions`` streaming ``max_tokens - short_by`` one-token chunks and a usage chunk;
    no answer starts before ``num_expected`` requests are in (so the driver must send them at once)."""
    bodies: list[dict[str, Any]] = []
    all_in = asyncio.Event()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        if len(bodies) >= num_expected:
            all_in.set()
        if status != 200:
            return web.json_response({"error": {"message": "no"}}, status=status)
        await asyncio.wait_for(all_in.wait(), timeout=10)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        num_tokens = body["max_tokens"] - short_by
        for i in range(num_tokens):
            await asyncio.sleep(delay_s)
            chunk = {"choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}], "usage": None}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": num_tokens}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake"}]})

    app = web.Application()
    app[BODIES] = bodies
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    return app


async def serve_fake(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


PROMPTS = [[17, 18, 19], [20] * 40, [21, 22]]
OUTPUT_LENS = [4, 1, 7]


async def test_run_workload_streams_every_request_at_once() -> None:
    app = fake_app(len(PROMPTS))
    async for url in serve_fake(app):
        timings = await run_workload(url, "fake", PROMPTS, OUTPUT_LENS)
    bodies = app[BODIES]
    assert sorted(body["prompt"] for body in bodies) == sorted(PROMPTS)  # arrival order is the server's
    assert all(body["ignore_eos"] and body["stream"] and body["model"] == "fake" for body in bodies)
    assert [t.num_output_tokens for t in timings] == OUTPUT_LENS
    for t in timings:
        assert t.submitted_s <= t.first_token_s <= t.last_token_s <= t.done_s
    assert timings[2].last_token_s - timings[2].first_token_s >= 6 * 0.002  # six sleeps after the first
    report = summarize(timings, sum(map(len, PROMPTS)))
    assert report["output_tokens"] == sum(OUTPUT_LENS)
    assert report["prompt_tokens"] == 45


async def test_a_short_stream_is_an_error() -> None:
    async for url in serve_fake(fake_app(1, short_by=1)):
        with pytest.raises(WorkloadError, match="asked for 4 tokens with ignore_eos, got 3"):
            await run_workload(url, "fake", [[17]], [4])


async def test_an_error_status_is_an_error() -> None:
    async for url in serve_fake(fake_app(1, status=400)):
        with pytest.raises(WorkloadError, match="answered 400"):
            await run_workload(url, "fake", [[17]], [4])


async def test_a_dead_server_is_an_error() -> None:
    with pytest.raises(aiohttp.ClientConnectionError):
        await run_workload(f"http://127.0.0.1:{free_port()}", "fake", [[17]], [4])


# ------------------------------------------------------------------------------- a whole server measured

FAKE_SERVER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{root!r}, {bench!r}]
    from aiohttp import web
    from tests.bench.test_server_workload import fake_app
    web.run_app(fake_app(1), host="127.0.0.1", port=int(sys.argv[1]), print=None)
    """
)


def test_measure_server_starts_measures_and_stops_a_process(tmp_path: Path) -> None:
    port = free_port()
    code = FAKE_SERVER.format(root=str(ROOT), bench=str(ROOT / "bench"))
    spec = ProcessSpec("fake", (sys.executable, "-c", code, str(port)), cpus=None, log_dir=tmp_path)
    report = measure_server(spec, f"http://127.0.0.1:{port}", "fake", [[17, 18]], [5], rss_interval_s=0.05)
    assert report["output_tokens"] == 5
    assert report["ready_s"] >= 0
    assert report["server_peak_rss_mib"] > 10  # a Python process with aiohttp loaded
    with pytest.raises(aiohttp.ClientConnectionError):  # stopped
        asyncio.run(run_workload(f"http://127.0.0.1:{port}", "fake", [[17]], [1]))


@pytest.mark.slow
def test_sortyards_server_takes_the_workload(tmp_path: Path) -> None:
    """Token-id prompts, ignore_eos and streamed usage through ``python -m backends.server``."""
    pytest.importorskip("transformers")
    from tests.backends.engine.tiny import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "tiny")
    port = free_port()
    argv = (sys.executable, "-m", "backends.server", "--model", f"tiny={model_dir}", "--port", str(port),
            "--embedding-model", "none", "--kv-cache-bytes", str(16 << 20))  # fmt: skip
    spec = ProcessSpec("sortyard", argv, cpus=None, log_dir=tmp_path, cwd=ROOT)
    prompts = [[i % 250 + 3 for i in range(n)] for n in (5, 40, 17)]
    output_lens = [3, 20, 1]
    report = measure_server(spec, f"http://127.0.0.1:{port}", "tiny", prompts, output_lens)
    assert report["num_requests"] == 3
    assert report["output_tokens"] == 24  # ignore_eos: exact lengths, whatever the random weights say
    assert report["prompt_tokens"] == 62
    assert report["tpot_p50_ms"] is not None and report["server_peak_rss_mib"] > 100
