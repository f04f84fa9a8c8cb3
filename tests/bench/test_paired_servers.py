"""bench/paired_servers.py: two fake OpenAI server processes up at once, the rounds' order and ratios,
both servers stopped afterwards; and engine_throughput's options and engine_servers' contenders that
drive it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import engine_servers
import engine_throughput
import pytest
from harness.processes import ProcessSpec, free_port
from paired_servers import Contender, round_order, rounds_table, run_paired, summarize_rounds
from server_workload import measure, run_workload

from tests.bench.test_server_workload import FAKE_SERVER

ROOT = Path(__file__).resolve().parents[2]


def fake_contender(label: str, tmp_path: Path) -> Contender:
    port = free_port()
    code = FAKE_SERVER.format(root=str(ROOT), bench=str(ROOT / "bench"))
    spec = ProcessSpec(label, (sys.executable, "-c", code, str(port)), cpus=None, log_dir=tmp_path)
    return Contender(label, spec, f"http://127.0.0.1:{port}")


def answers(base_url: str) -> bool:
    """Whether the server answers ``GET /v1/models`` within half a second (a paused one never does)."""

    async def get() -> bool:
        timeout = aiohttp.ClientTimeout(total=0.5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                async with session.get(base_url + "/v1/models") as resp:
                    return resp.status == 200
            except TimeoutError:
                return False

    return asyncio.run(get())


def test_rounds_alternate_which_server_goes_first() -> None:
    assert [round_order(i) for i in range(4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_summary_is_the_median_and_geometric_mean_of_paired_ratios() -> None:
    rounds = [
        {
            "ratio": 2.0,
            "a": {"output_tok_s": 20.0},
            "b": {"output_tok_s": 10.0},
            "idle_cpu_s": {"a": 0.1, "b": 0.0},
        },
        {
            "ratio": 0.5,
            "a": {"output_tok_s": 5.0},
            "b": {"output_tok_s": 10.0},
            "idle_cpu_s": {"a": 0.0, "b": 0.3},
        },
        {
            "ratio": 1.0,
            "a": {"output_tok_s": 8.0},
            "b": {"output_tok_s": 8.0},
            "idle_cpu_s": {"a": 0.0, "b": 0.0},
        },
    ]
    summary = summarize_rounds(("a", "b"), rounds)
    assert summary["median_ratio"] == 1.0
    assert summary["geomean_ratio"] == 1.0  # 2 * 0.5 * 1 = 1
    assert (summary["min_ratio"], summary["max_ratio"]) == (0.5, 2.0)
    assert summary["median_output_tok_s"] == {"a": 8.0, "b": 10.0}
    assert summary["max_idle_cpu_s"] == {"a": 0.1, "b": 0.3}


def test_two_servers_take_every_workload_in_alternating_order_and_are_stopped(tmp_path: Path) -> None:
    a, b = fake_contender("a", tmp_path), fake_contender("b", tmp_path)
    calls: list[tuple[str, int]] = []

    def run_round(url: str, model: str, prompts: Sequence[list[int]], lens: Sequence[int]) -> dict[str, Any]:
        calls.append((url, len(prompts)))
        idle = b if url == a.base_url else a
        assert not answers(idle.base_url), "the idle server must be paused while the other runs"
        return measure(url, model, prompts, lens, do_warm_up=False)

    workloads = [([[17, 18]] * n, [3] * n) for n in (1, 2, 3)]
    result = run_paired((a, b), "fake", workloads, run_round=run_round)
    assert calls == [
        (a.base_url, 1),
        (b.base_url, 1),
        (b.base_url, 2),
        (a.base_url, 2),
        (a.base_url, 3),
        (b.base_url, 3),
    ]
    assert [r["order"] for r in result["rounds"]] == [["a", "b"], ["b", "a"], ["a", "b"]]
    for r in result["rounds"]:
        assert r["ratio"] == round(r["a"]["output_tok_s"] / r["b"]["output_tok_s"], 3)
        assert set(r["idle_cpu_s"]) == {"a", "b"} and min(r["idle_cpu_s"].values()) >= 0
    assert result["rounds"][2]["a"]["output_tokens"] == 9
    assert set(result["ready_s"]) == {"a", "b"}
    assert min(result["server_peak_rss_mib"].values()) > 10
    assert len(rounds_table(result).splitlines()) == 2 + 3
    for server in (a, b):  # both stopped
        with pytest.raises(aiohttp.ClientConnectionError):
            asyncio.run(run_workload(server.base_url, "fake", [[17]], [1]))


def test_a_failing_round_still_stops_both_servers(tmp_path: Path) -> None:
    a, b = fake_contender("a", tmp_path), fake_contender("b", tmp_path)

    def run_round(url: str, model: str, prompts: Sequence[list[int]], lens: Sequence[int]) -> dict[str, Any]:
        raise RuntimeError("the workload broke")

    with pytest.raises(RuntimeError, match="the workload broke"):
        run_paired((a, b), "fake", [([[17]], [1])], run_round=run_round)
    for server in (a, b):
        with pytest.raises(aiohttp.ClientConnectionError):
            asyncio.run(run_workload(server.base_url, "fake", [[17]], [1]))


def test_contenders_need_distinct_names_and_a_workload(tmp_path: Path) -> None:
    a = fake_contender("a", tmp_path)
    with pytest.raises(ValueError, match="two contenders"):
        run_paired((a, a), "fake", [([[17]], [1])])
    with pytest.raises(ValueError, match="at least one workload"):
        run_paired((a, fake_contender("b", tmp_path)), "fake", [])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "2"], "--rounds pairs two servers"),
        (["--rounds", "2", "--baseline", "hf-static8"], "--rounds pairs two servers"),
        (["--baseline-env", "A=1"], "--baseline-env sets the environment of a baseline"),
        (["--baseline", "sortyard", "--baseline-env", "A"], "KEY=VALUE"),
    ],
)
def test_engine_throughput_refuses_rounds_without_two_servers(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        engine_throughput.main(argv)
    assert message in capsys.readouterr().err


def test_the_sortyard_baseline_differs_only_by_its_environment(tmp_path: Path) -> None:
    ns = engine_throughput.parse_args(["--baseline", "sortyard", "--baseline-env", "KMP_BLOCKTIME=0"])
    first, second = engine_servers.contenders(ns, tmp_path)
    assert (first.label, second.label) == ("sortyard", "sortyard-baseline")
    strip_port = lambda argv: [x for i, x in enumerate(argv) if i == 0 or argv[i - 1] != "--port"]  # noqa: E731
    assert strip_port(first.spec.argv) == strip_port(second.spec.argv)
    assert first.base_url != second.base_url
    assert dict(first.spec.env) == {} and dict(second.spec.env) == {"KMP_BLOCKTIME": "0"}
