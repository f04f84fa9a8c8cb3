"""bench/gpu/run.py without a GPU: the dry run end to end (tiny model, CPU, the eager twin of CUDA graphs),
and the parts its GPU figures rest on: the workload, the bytes a step reads, the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu import run
from gpu.checks import rated_bandwidth_gb_s
from gpu.models import LLAMA_1B, SMOLLM2_135M, TINY, random_weights, weight_bytes_per_step
from gpu.table import Row, format_table, format_value
from gpu.workload import Workload

from backends.engine.model_config import ModelConfig
from backends.engine.models.llama import LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[3]


def test_the_dry_run_prints_every_part_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    num_threads = torch.get_num_threads()  # the engines set it process-wide
    try:
        rows = run.main(["--dry-run"])
    finally:
        torch.set_num_threads(num_threads)
    failed = [row for row in rows if row.measurement == "failed"]
    assert not failed, failed
    measured = {(row.section, row.measurement): row.value for row in rows}
    for measurement in (
        "decode, batch 1, eager",
        "decode, batch 1, graphs (eager twin)",
        "6 requests, eager",
        "6 requests, graphs (eager twin)",
        "bytes per decode step, batch 1",
    ):
        value = measured[("tiny float32 cpu", measurement)]
        assert isinstance(value, float) and value > 0, measurement
    assert any(section.startswith("quant") for section, _ in measured)
    printed = capsys.readouterr().out
    assert "| section" in printed and "graphs (eager twin)" in printed and "int4 cpu, batch 16" in printed


def test_the_script_refuses_to_run_without_a_gpu_unless_dry() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    done = subprocess.run(
        [sys.executable, "bench/gpu/run.py", "--skip-tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode != 0 and "--dry-run" in done.stderr


def test_the_workload_is_engine_throughputs() -> None:
    """The same lengths as bench/engine_throughput.py's 64 requests (16k prompt, 9.3k output tokens)."""
    import engine_throughput

    work = Workload.build(64, SMOLLM2_135M.vocab_size)
    theirs = engine_throughput.Workload.build(64, 0)
    assert [len(p) for p in work.prompts] == [len(p) for p in theirs.prompts]
    assert work.output_lens == theirs.output_lens
    assert sum(map(len, work.prompts)) == 16_315 and work.num_output_tokens == 9_306
    wide = Workload.build(64, LLAMA_1B.vocab_size)
    assert [len(p) for p in wide.prompts] == [len(p) for p in work.prompts]
    assert all(1 <= t < LLAMA_1B.vocab_size - 1 for p in wide.prompts for t in p)  # never eos
    small = Workload([[1, 2, 3]], [4])
    assert small.kv_tokens_read() == 4 + 5 + 6  # three decodes after the prefill's token


@pytest.mark.parametrize("cfg", [TINY, SMOLLM2_135M, LLAMA_1B], ids=["tiny", "smollm2", "llama-1b"])
def test_the_weight_bytes_a_step_reads_are_the_models_parameters(cfg: ModelConfig) -> None:
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    param_bytes = sum(p.numel() * 2 for p in model.parameters())  # a tied LM head counted once
    untied_embedding = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size * 2
    assert weight_bytes_per_step(cfg, 2) == param_bytes - untied_embedding


def test_random_weights_name_every_parameter() -> None:
    model = LlamaForCausalLM(TINY)
    model.load_weights(random_weights(TINY, torch.device("cpu")))  # raises on a missing or unknown name


def test_rated_bandwidth_by_device_name() -> None:
    assert rated_bandwidth_gb_s("NVIDIA H200") == 4800.0
    assert rated_bandwidth_gb_s("NVIDIA H100 PCIe") == 2000.0
    assert rated_bandwidth_gb_s("NVIDIA H100 80GB HBM3") == 3350.0
    assert rated_bandwidth_gb_s("NVIDIA A100-SXM4-80GB") == 2039.0
    assert rated_bandwidth_gb_s("Some GPU") is None


def test_the_table_pads_its_columns() -> None:
    table = format_table([Row("a", "decode", 1234.5, "tok/s"), Row("bb", "failed", None, note="why")])
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # every line as wide
    assert "1,234" in table and "| -" in table
    assert format_value(0.00421) == "0.00421" and format_value("H200") == "H200"
