"""bench/gemm_paths.py and bench/decode_kernel.py (quoted in docs/engine.md and docs/benchmarks.md): each
runs at a small size and reports what the docs quote."""

from __future__ import annotations

import decode_kernel
import gemm_paths
import pytest

from backends.engine.kernels import cpu_decode


def test_gemm_paths_agree_and_report_gflops_per_path() -> None:
    rows = gemm_paths.main(["--rows", "2"])
    assert [row["weight"] for row in rows] == list(gemm_paths.SHAPES)
    for row in rows:
        assert row["rows"] == 2
        assert all(float(str(row[path])) > 0 for path in ("onednn_packed", "mkl_packed", "f_linear"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_kernel_reports_its_path_and_bandwidth(dtype: str) -> None:
    kernel = cpu_decode.load()
    if kernel is None:
        pytest.skip("no C compiler here")
    argv = ["--dtype", dtype, "--num-seqs", "3", "--repeats", "2", "--max-len", "40", "--vs-portable"]
    result = decode_kernel.main(argv)
    assert result["isa"] == kernel.isa
    assert float(str(result["portable_ms_per_layer_p50"])) > 0 and not kernel.portable
    assert result["num_seqs"] == 3 and 3 * 32 <= int(str(result["context_tokens"])) <= 3 * 40
    assert float(str(result["kv_gb_s"])) > 0
