"""The run plan: warm each target, then wrk at every concurrency and the SSE stream, round after round.

Rounds interleave the targets (round 1: A, B, C; round 2: A, B, C, ...) so that a noisy neighbour
hits every row alike; the report takes the median of the rounds.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .targets import JSON_MODEL, SSE_MODEL, Target
from .wrk import WrkResult, WrkRun, run_wrk


@dataclass(frozen=True)
class Plan:
    """What to run against every target."""

    duration_s: int
    """Seconds of each measured wrk run."""
    warmup_s: int
    """Seconds of warm-up per target and endpoint before the first round (0 for none)."""
    concurrencies: tuple[int, ...]
    """Connection counts for the plain (non-streaming) runs."""
    stream_concurrency: int
    """Connection count for the SSE run (streams/s)."""
    api_key: str
    """Bearer token sent on every request."""
    client_cpus: str | None
    """taskset CPU list for wrk."""
    num_rounds: int = 1
    """Times the whole set of runs repeats."""
    accept_encoding: str = ""
    """``Accept-Encoding`` of every request (empty: none, so nothing is compressed)."""


@dataclass(frozen=True)
class Point:
    """One measured cell: a target, an endpoint and a concurrency, in one round."""

    label: str
    round_index: int
    is_stream: bool
    num_connections: int
    result: WrkResult
    cpu_ms_per_request: float
    """CPU time of the target's process tree during the run over the requests it served."""
    cpu_utilization: float
    """That CPU time over the run's wall time: near 1.0 per busy core; far below at high concurrency
    means something else (another process on the pinned core) took the CPU, so req/s reads low."""


def _wrk_run(target: Target, plan: Plan, *, is_stream: bool, num_connections: int, duration_s: int) -> WrkRun:
    return WrkRun(
        url=target.sse_url if is_stream else target.json_url,
        num_connections=num_connections,
        duration_s=duration_s,
        model=SSE_MODEL if is_stream else JSON_MODEL,
        is_stream=is_stream,
        api_key=plan.api_key,
        cpus=plan.client_cpus,
        accept_encoding=plan.accept_encoding,
    )


def warm_up(target: Target, plan: Plan) -> None:
    if plan.warmup_s <= 0:
        return
    for is_stream in (False, True):
        run_wrk(
            _wrk_run(
                target,
                plan,
                is_stream=is_stream,
                num_connections=plan.stream_concurrency,
                duration_s=plan.warmup_s,
            )
        )


def measure_point(
    target: Target, plan: Plan, round_index: int, *, is_stream: bool, num_connections: int
) -> Point:
    cpu_before_s = target.process.cpu_s()
    result = run_wrk(
        _wrk_run(
            target, plan, is_stream=is_stream, num_connections=num_connections, duration_s=plan.duration_s
        )
    )
    cpu_ms = (target.process.cpu_s() - cpu_before_s) * 1000.0
    target.process.check_alive()
    point = Point(
        target.label,
        round_index,
        is_stream,
        num_connections,
        result,
        cpu_ms_per_request=cpu_ms / result.num_requests if result.num_requests else 0.0,
        cpu_utilization=cpu_ms / 1000.0 / result.duration_s if result.duration_s else 0.0,
    )
    kind = "sse " if is_stream else "json"
    print(
        f"  {target.label:<28} {kind} c={num_connections:<3} {result.requests_per_s:>9,.0f} req/s  "
        f"p50 {result.p50_ms:.3f} ms  p99 {result.p99_ms:.3f} ms  cpu {point.cpu_ms_per_request:.3f} ms/req "
        f"({point.cpu_utilization:.0%} of a core)",
        file=sys.stderr,
        flush=True,
    )
    return point


def measure(targets: Sequence[Target], plan: Plan) -> list[Point]:
    """Every run of the plan against every target; raises WrkError at the first failing run."""
    for target in targets:
        warm_up(target, plan)
    points: list[Point] = []
    for round_index in range(plan.num_rounds):
        for target in targets:
            for num_connections in plan.concurrencies:
                points.append(
                    measure_point(target, plan, round_index, is_stream=False, num_connections=num_connections)
                )
            points.append(
                measure_point(
                    target, plan, round_index, is_stream=True, num_connections=plan.stream_concurrency
                )
            )
    return points
