"""bench/kv_window.py (quoted in docs/engine.md) measures what freeing saves and computes Gemma 3's
figures; a tiny configuration runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kv_window import GEMMA3_270M, window_blocks

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_measures_freeing_and_computes_gemma(tmp_path: Path) -> None:
    out = tmp_path / "kv_window.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "kv_window.py"),
            *("--context", "256", "--window", "64", "--num-seqs", "2", "--json-out", str(out)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    kept, freed, one_pool, two_groups = json.loads(out.read_text())
    assert kept["kv_blocks"] == "32" and kept["bytes_per_token"] == 512  # 2 x 16 blocks, fp32 tiny model
    assert freed["kv_blocks"] == str(2 * window_blocks(64))  # 5 blocks a sequence however long it grows
    assert one_pool["bytes_per_token"] == two_groups["bytes_per_token"] == 18 * 1024  # 256 < the window


def test_gemma_two_groups_at_4k() -> None:
    # one pool: 18 layers x 1 KV head x 256 x K,V x bf16; two groups: 3 full layers keep all 4096
    # tokens, 15 sliding layers the 33 blocks a 512-token window spans
    assert GEMMA3_270M.single_pool_bytes(4096) == 18 * 1024 * 4096
    assert GEMMA3_270M.two_group_bytes(4096) == (3 * 4096 + 15 * 33 * 16) * 1024
    assert GEMMA3_270M.two_group_bytes(4096) / 4096 == 5052
