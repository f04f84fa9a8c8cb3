"""The engine workload driven through any OpenAI-compatible server's ``POST /v1/completions``.

Every request is submitted at once as a token-id prompt (``"prompt": [ids]``), greedy, with
``ignore_eos`` (a vLLM extension Sortyard's server also takes) so each output length is exact, and
streamed, so the first token and the last are timed per request. ``stream_options.include_usage``
asks for the server's own count of output tokens, which must equal ``max_tokens``.

Figures, as ``bench/engine_throughput.py`` reports them in process:

- output tok/s: output tokens over the wall time from the first submission to the last stream's end;
- TTFT: from submission to the first chunk that carries a choice;
- TPOT: (last token chunk - first) / (output tokens - 1), per request;
- ready s: from the server's start to ``GET /v1/models`` answering 200 (the caller's clock);
- peak RSS: the largest sum of resident memory over the server's process tree, sampled every
  ``interval_s`` while it starts and serves (shared pages counted once per process).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from harness.errors import BenchError
from harness.processes import ManagedProcess, ProcessSpec


class WorkloadError(BenchError):
    """A request failed, or the server streamed a different number of tokens than asked."""


@dataclass(frozen=True)
class RequestTiming:
    """One streamed completion, times in seconds from the run's start."""

    submitted_s: float
    first_token_s: float
    last_token_s: float
    done_s: float
    num_output_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.submitted_s

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first; None for one-token answers."""
        if self.num_output_tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.num_output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(timings: Sequence[RequestTiming], num_prompt_tokens: int) -> dict[str, Any]:
    """The run's figures from its per-request timings; wall time ends with the last stream."""
    if not timings:
        raise WorkloadError("no request finished")
    wall_s = max(t.done_s for t in timings) - min(t.submitted_s for t in timings)
    num_out = sum(t.num_output_tokens for t in timings)
    ttft = [t.ttft_s for t in timings]
    tpot = [s for s in (t.tpot_s for t in timings) if s is not None]
    return {
        "num_requests": len(timings),
        "prompt_tokens": num_prompt_tokens,
        "output_tokens": num_out,
        "wall_s": round(wall_s, 1),
        "output_tok_s": round(num_out / wall_s, 1),
        "total_tok_s": round((num_out + num_prompt_tokens) / wall_s, 1),
        "ttft_p50_s": round(percentile(ttft, 0.5), 2),
        "ttft_p99_s": round(percentile(ttft, 0.99), 2),
        "tpot_p50_ms": round(1000 * statistics.median(tpot), 1) if tpot else None,
    }


def completion_body(model: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """The request every server gets: token ids in, exactly ``max_tokens`` out, greedy, streamed."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    clock: Callable[[], float],
) -> RequestTiming:
    """POST one streamed completion and time its chunks; checks the server's token count."""
    submitted = clock()
    first: float | None = None
    last = submitted
    num_chunks = 0
    usage: dict[str, Any] | None = None
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise WorkloadError(f"{url} answered {resp.status}: {(await resp.text())[:500]}")
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("choices"):  # a token chunk (the usage chunk has none)
                last = clock()
                first = last if first is None else first
                num_chunks += 1
            if chunk.get("usage"):
                usage = chunk["usage"]
    done = clock()
    if first is None:
        raise WorkloadError(f"{url}: a stream ended without a token")
    num_tokens = int(usage["completion_tokens"]) if usage else num_chunks
    if num_tokens != body["max_tokens"]:
        raise WorkloadError(f"{url}: asked for {body['max_tokens']} tokens with ignore_eos, got {num_tokens}")
    return RequestTiming(submitted, first, last, done, num_tokens)


async def run_workload(
    base_url: str,
    model: str,
    prompts: Sequence[list[int]],
    output_lens: Sequence[int],
    *,
    timeout_s: float = 3600.0,
    clock: Callable[[], float] = time.perf_counter,
) -> list[RequestTiming]:
    """Submit every request at once (one connection each) and wait for all of them."""
    url = base_url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0)  # no client-side queue: the server sees them all
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await asyncio.gather(
            *(
                stream_completion(session, url, completion_body(model, p, n), clock)
                for p, n in zip(prompts, output_lens, strict=True)
            )
        )


async def warm_up(base_url: str, model: str, prompt: list[int]) -> None:
    """One short request, so one-time costs of the first request stay out of the figures."""
    await run_workload(base_url, model, [prompt[:8]], [2], timeout_s=600.0)


class PeakSampler:
    """Samples ``read()`` (e.g. a process tree's RSS in MiB) every ``interval_s`` in a thread and
    keeps the largest value; use as a context manager around what should be covered."""

    def __init__(self, read: Callable[[], float], interval_s: float = 0.25) -> None:
        self._read = read
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)
        self.peak = 0.0

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self._read())
            if self._stop.wait(self._interval_s):
                return

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._read())


def measure(
    base_url: str,
    model: str,
    prompts: Sequence[list[int]],
    output_lens: Sequence[int],
    *,
    do_warm_up: bool = True,
) -> dict[str, Any]:
    """Warm the server up, run the workload, and return ``summarize``'s figures."""
    if do_warm_up:
        asyncio.run(warm_up(base_url, model, prompts[0]))
    timings = asyncio.run(run_workload(base_url, model, prompts, output_lens))
    return summarize(timings, sum(map(len, prompts)))


def measure_server(
    spec: ProcessSpec,
    base_url: str,
    model: str,
    prompts: Sequence[list[int]],
    output_lens: Sequence[int],
    *,
    ready_timeout_s: float = 900.0,
    rss_interval_s: float = 0.5,
) -> dict[str, Any]:
    """Start the server ``spec`` describes, wait until ``GET /v1/models`` answers 200, run the
    workload, stop it; ``measure``'s figures plus ``ready_s`` and ``server_peak_rss_mib``."""
    server = ManagedProcess(spec)
    server.start()
    try:
        with PeakSampler(server.rss_mib, rss_interval_s) as rss:
            ready_s = server.wait_healthy(base_url.rstrip("/") + "/v1/models", ready_timeout_s)
            figures = measure(base_url, model, prompts, output_lens)
    finally:
        server.stop(timeout_s=30.0)
    return {**figures, "ready_s": round(ready_s, 1), "server_peak_rss_mib": round(rss.peak)}


COLUMNS = (
    ("system", "system"),
    ("output tok/s", "output_tok_s"),
    ("wall s", "wall_s"),
    ("TTFT p50 / p99 s", ("ttft_p50_s", "ttft_p99_s")),
    ("TPOT p50 ms", "tpot_p50_ms"),
    ("ready after start s", "ready_s"),
    ("server peak RSS MiB", "server_peak_rss_mib"),
)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """One row per server, in the columns docs/benchmarks.md quotes."""

    def cell(row: dict[str, Any], key: str | tuple[str, str]) -> str:
        if isinstance(key, tuple):
            return " / ".join(str(row.get(k, "-")) for k in key)
        return str(row.get(key, "-"))

    lines = [
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cell(row, key) for _, key in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)
