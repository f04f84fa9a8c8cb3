"""gateway/cli/cost.py: the playbook's cost formula and GPU-seconds per token from result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.cli.cost import (
    CostEstimate,
    CostInputError,
    monthly_cost_usd,
    requests_per_month,
    throughput_from_bench_json,
    throughput_from_locust_csv,
    throughput_from_result,
)
from tests.loadtests.locust_csv import SAMPLE_ROWS, row, write_stats


def cost_main(argv: list[str]) -> int:
    """``sortyard cost ...`` in-process."""
    return main(["cost", *argv])


def test_formula_as_the_playbook_writes_it() -> None:
    # 10M requests x 500 tokens x 0.002 GPU-s/token x $3/GPU-hour / 3600
    assert monthly_cost_usd(10_000_000, 500, 0.002, 3.0) == pytest.approx(8333.333, rel=1e-6)
    estimate = CostEstimate(10_000_000, 500, 0.002, 3.0)
    assert estimate.monthly_usd == pytest.approx(monthly_cost_usd(10_000_000, 500, 0.002, 3.0))
    assert estimate.gpu_hours_per_month == pytest.approx(2777.778, rel=1e-6)
    assert estimate.usd_per_million_tokens == pytest.approx(1e6 * 0.002 * 3.0 / 3600)
    assert estimate.average_gpus_busy == pytest.approx(2777.778 / 730, rel=1e-6)


def test_locust_csv_gives_gpu_seconds_per_token(tmp_path: Path) -> None:
    stats = write_stats(tmp_path / "run", *SAMPLE_ROWS)
    throughput = throughput_from_locust_csv(stats, gpus_per_replica=2)
    # 4,800 tokens in 60 s on 2 GPUs: 120 GPU-s / 4,800 tokens
    assert throughput.gpu_s_per_token == pytest.approx(120 / 4800)
    assert "4,800 output tokens in 60.0 s = 80.0 tok/s on 2 GPU(s)" in throughput.derivation
    by_prefix = throughput_from_result(tmp_path / "run", gpus_per_replica=2)  # the --csv prefix works too
    assert by_prefix.gpu_s_per_token == throughput.gpu_s_per_token


def test_bench_json_gives_gpu_seconds_per_token(tmp_path: Path) -> None:
    engine = tmp_path / "engine.json"  # bench/engine_throughput.py's output
    engine.write_text(json.dumps({"system": "engine (float32)", "output_tok_s": 40.0, "wall_s": 200.0}))
    assert throughput_from_bench_json(engine).gpu_s_per_token == pytest.approx(1 / 40)
    per_s = tmp_path / "per_s.json"
    per_s.write_text(json.dumps({"output_tok_per_s": 2000.0}))
    assert throughput_from_result(per_s, gpus_per_replica=8).gpu_s_per_token == pytest.approx(8 / 2000)
    log = tmp_path / "bench.log"  # a captured stdout: the last JSON line counts
    log.write_text('loading...\n{"output_tokens": 1000, "wall_s": 20}\n')
    assert throughput_from_result(log).gpu_s_per_token == pytest.approx(20 / 1000)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("nothing.json", '{"wall_s": 3}', "expected a positive 'output_tok_per_s'"),
        ("list.json", "[1, 2]", "expected a JSON object"),
        ("zero.json", '{"output_tok_per_s": 0}', "expected a positive"),
        ("garbage.json", "not json at all", "expected a JSON object"),
    ],
)
def test_bad_bench_json_is_refused(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CostInputError, match=message):
        throughput_from_result(path)


def test_bad_locust_csv_is_refused(tmp_path: Path) -> None:
    no_tokens = write_stats(tmp_path / "a", row("POST", "chat", 3, 0, 10, 100.0, 1.0))
    with pytest.raises(CostInputError, match="no TOKENS/output row"):
        throughput_from_locust_csv(no_tokens)
    empty = write_stats(tmp_path / "b", row("TOKENS", "output", 0, 0, 0, 0.0, 0.0))
    with pytest.raises(CostInputError, match="no output tokens"):
        throughput_from_locust_csv(empty)
    with pytest.raises(CostInputError, match="cannot read"):
        throughput_from_result(tmp_path / "missing_stats.csv")


def test_cli_with_gpu_seconds_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--requests-per-month", "10000000", "--tokens-per-request", "500"]
    argv += ["--gpu-seconds-per-token", "0.002", "--gpu-hour-usd", "3"]
    assert cost_main(argv) == 0
    out = capsys.readouterr().out
    assert "monthly cost: $8,333.33" in out
    assert "cost per 1M tokens: $1.6667" in out
    assert "GPU-hours per month: 2,777.8" in out


def test_cli_from_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = write_stats(tmp_path / "run", *SAMPLE_ROWS)
    argv = ["estimate", "--requests-per-month", "1000000", "--tokens-per-request", "200"]
    argv += ["--from-result", str(stats), "--gpu-hour-usd", "2.5"]
    assert cost_main(argv) == 0
    out = capsys.readouterr().out
    # S = 1 / 80 tok/s; 1e6 x 200 x 0.0125 x 2.5 / 3600
    assert f"monthly cost: ${1e6 * 200 * 0.0125 * 2.5 / 3600:,.2f}" in out
    assert "GPU-seconds per token: 0.0125, from " in out


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["estimate", "--requests-per-month", "1", "--tokens-per-request", "1", "--gpu-hour-usd", "1"]
    assert cost_main([*base, "--from-result", str(tmp_path / "nope.json")]) == 2
    assert "error: " in capsys.readouterr().err
    assert cost_main([*base, "--gpu-seconds-per-token", "0.1", "--gpus-per-replica", "2"]) == 2
    assert "--gpus-per-replica applies to --from-result" in capsys.readouterr().err
    for bad in (base, [*base, "--gpu-seconds-per-token", "-1"], [*base, "--gpu-seconds-per-token", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            cost_main(bad)
        assert exit_info.value.code == 2


def test_requests_per_day_is_the_same_estimate_as_per_month(capsys: pytest.CaptureFixture[str]) -> None:
    rest = ["--tokens-per-request", "500", "--gpu-seconds-per-token", "0.002", "--gpu-hour-usd", "3"]
    # 2,400 a day in the 730-hour month the formula counts GPU-hours in: 2,400 x 730 / 24 = 73,000
    assert requests_per_month(per_day=2400) == 73_000 == requests_per_month(per_month=73_000)
    assert cost_main(["estimate", "--requests-per-month", "73000", *rest]) == 0
    per_month = capsys.readouterr().out.splitlines()
    assert cost_main(["estimate", "--requests-per-day", "2400", *rest]) == 0
    per_day = capsys.readouterr().out.splitlines()
    assert per_day[:2] == per_month[:2] and per_day[3:] == per_month[2:]
    assert per_day[0] == f"monthly cost: ${73_000 * 500 * 0.002 * 3 / 3600:,.2f}"
    assert per_day[2] == "  requests per month = 2,400 a day x 30.42 days"


def test_requests_per_day_or_per_month_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    rest = ["--tokens-per-request", "1", "--gpu-seconds-per-token", "1", "--gpu-hour-usd", "1"]
    both = ["estimate", "--requests-per-day", "1", "--requests-per-month", "30", *rest]
    for bad in (both, ["estimate", *rest], ["estimate", "--requests-per-day", "0", *rest]):
        with pytest.raises(SystemExit) as exit_info:
            cost_main(bad)
        assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(CostInputError):
        requests_per_month(per_month=1, per_day=1)
    with pytest.raises(SystemExit):
        cost_main(["estimate", "--help"])
    assert "--requests-per-day N" in capsys.readouterr().out


def test_a_result_file_that_is_not_utf8_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["estimate", "--requests-per-month", "1", "--tokens-per-request", "1", "--gpu-hour-usd", "1"]
    for name in ("bin_stats.csv", "bin.json"):
        (tmp_path / name).write_bytes(b"\xff\xfe\x00garbage\n")
        assert cost_main([*base, "--from-result", str(tmp_path / name)]) == 2
        assert f"{tmp_path / name}: not UTF-8 text" in capsys.readouterr().err


def test_an_estimate_that_overflows_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    huge = ["--requests-per-month", "1e200", "--tokens-per-request", "1e200", "--gpu-seconds-per-token", "1"]
    assert cost_main(["estimate", *huge, "--gpu-hour-usd", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: the estimate overflows")
