"""Two OpenAI servers up at once, the same workloads through each in alternating order: a paired ratio.

On a VM whose speed moves by tens of percent within minutes, two fresh servers measured one after the
other compare two moments of the host as much as two servers. Here both servers start first and stay
up. Each round builds a new workload (a new seed, so no prefix cache has seen its prompts) and runs it
through one server, then the other; the next round swaps the order. The figure is the median over
rounds of the first server's output tok/s over the second's in the same round, with the geometric mean
beside it.

While one server works, the other is paused (SIGSTOP to its process group, SIGCONT and a health check
before its own turn). An idle server is not quiet: vLLM's CPU build, idle, wakes its thirteen gloo
threads about 1,300 times a second, each wakeup able to stall one of the busy server's two OpenMP
workers at a barrier, which cost the busy server about 9% on two cores. The idle side's CPU seconds
are still counted, and must stay near zero.

``bench/engine_throughput.py --rounds N`` drives this for Sortyard against vLLM's CPU build, or
against itself with a different environment (``--baseline sortyard --baseline-env K=V``).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from harness.processes import ManagedProcess, ProcessSpec
from server_workload import PeakSampler, measure, warm_up

Work = tuple[Sequence[list[int]], Sequence[int]]
"""One round's requests: token-id prompts and their exact output lengths."""
Measure = Callable[[str, str, Sequence[list[int]], Sequence[int]], dict[str, Any]]
"""(base url, model, prompts, output lengths) -> server_workload's figures, ``output_tok_s`` among them."""


@dataclass(frozen=True)
class Contender:
    """One of the two servers: how to start it and where it answers."""

    label: str
    spec: ProcessSpec
    base_url: str


def _measure_warm(
    base_url: str, model: str, prompts: Sequence[list[int]], lens: Sequence[int]
) -> dict[str, Any]:
    return measure(base_url, model, prompts, lens, do_warm_up=False)


def round_order(index: int) -> tuple[int, int]:
    """Round 0 runs the first contender first, round 1 the second, and so on."""
    return (0, 1) if index % 2 == 0 else (1, 0)


def summarize_rounds(labels: tuple[str, str], rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median, geometric mean and range of the per-round ratios first/second, and each side's median."""
    ratios = [r["ratio"] for r in rounds]
    a, b = labels
    return {
        "median_ratio": round(statistics.median(ratios), 3),
        "geomean_ratio": round(math.exp(statistics.fmean(map(math.log, ratios))), 3),
        "min_ratio": round(min(ratios), 3),
        "max_ratio": round(max(ratios), 3),
        "median_output_tok_s": {
            a: round(statistics.median(r[a]["output_tok_s"] for r in rounds), 1),
            b: round(statistics.median(r[b]["output_tok_s"] for r in rounds), 1),
        },
        "max_idle_cpu_s": {label: round(max(r["idle_cpu_s"][label] for r in rounds), 2) for label in labels},
    }


def run_paired(
    contenders: tuple[Contender, Contender],
    model: str,
    workloads: Sequence[Work],
    *,
    ready_timeout_s: float = 900.0,
    run_round: Measure = _measure_warm,
) -> dict[str, Any]:
    """Start both servers (one after the other, so neither's start slows the other's), warm each up,
    then run every workload through both in ``round_order``, the idle one paused; stops both whatever
    happens."""
    if not workloads:
        raise ValueError("run_paired needs at least one workload")
    labels = (contenders[0].label, contenders[1].label)
    if labels[0] == labels[1]:
        raise ValueError(f"two contenders named {labels[0]!r}")
    servers = [ManagedProcess(c.spec) for c in contenders]
    with ExitStack() as stack:
        ready_s: dict[str, float] = {}
        samplers: dict[str, PeakSampler] = {}
        for contender, server in zip(contenders, servers, strict=True):
            server.start()
            stack.callback(server.stop, 30.0)
            samplers[contender.label] = stack.enter_context(PeakSampler(server.rss_mib, 0.5))
            ready_s[contender.label] = round(
                server.wait_healthy(contender.base_url.rstrip("/") + "/v1/models", ready_timeout_s), 1
            )
            asyncio.run(warm_up(contender.base_url, model, list(workloads[0][0][0])))
            server.pause()
        rounds = []
        for index, (prompts, lens) in enumerate(workloads):
            row: dict[str, Any] = {"round": index + 1, "idle_cpu_s": {}}
            for i in round_order(index):
                busy, server, idle = contenders[i], servers[i], servers[1 - i]
                server.resume()
                server.wait_healthy(busy.base_url.rstrip("/") + "/v1/models", ready_timeout_s)
                idle_before = idle.cpu_s()
                row[busy.label] = run_round(busy.base_url, model, prompts, lens)
                row["idle_cpu_s"][labels[1 - i]] = round(idle.cpu_s() - idle_before, 2)
                server.pause()
            row["order"] = [labels[i] for i in round_order(index)]
            row["ratio"] = round(row[labels[0]]["output_tok_s"] / row[labels[1]]["output_tok_s"], 3)
            rounds.append(row)
    return {
        "contenders": list(labels),
        "rounds": rounds,
        "ready_s": ready_s,
        "server_peak_rss_mib": {label: round(s.peak) for label, s in samplers.items()},
        **summarize_rounds(labels, rounds),
    }


def rounds_table(result: dict[str, Any]) -> str:
    """One line per round: each side's output tok/s, the ratio, the order, the idle side's CPU."""
    a, b = result["contenders"]
    lines = [
        f"| round | order | {a} tok/s | {b} tok/s | {a} / {b} | idle CPU s while the other ran |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rounds"]:
        idle = ", ".join(f"{k} {v}" for k, v in r["idle_cpu_s"].items())
        lines.append(
            f"| {r['round']} | {' then '.join(r['order'])} | {r[a]['output_tok_s']} | "
            f"{r[b]['output_tok_s']} | {r['ratio']} | {idle} |"
        )
    return "\n".join(lines)
