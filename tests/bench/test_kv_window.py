"""bench/kv_window.py (quoted in docs/engine.md) measures what freeing saves (every layer sliding, and
two KV groups for a mixed model) and computes Gemma 3's figures; a tiny configuration runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kv_window import GEMMA3_270M, window_blocks

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_measures_both_layouts_and_computes_gemma(tmp_path: Path) -> None:
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
    kept, freed, mixed_one_pool, mixed_two_groups, one_pool, two_groups = json.loads(out.read_text())
    assert all(r["how"] == "measured" for r in (kept, freed, mixed_one_pool, mixed_two_groups))
    assert kept["kv_blocks"] == "32" and kept["bytes_per_token"] == 512  # 2 x 16 blocks, fp32 tiny model
    assert freed["kv_blocks"] == str(2 * window_blocks(64))  # 5 blocks a sequence however long it grows
    # the mixed model: 6 layers in one pool; two groups keep the full layer's 32 blocks, free the others'
    assert mixed_one_pool["kv_blocks"] == "32" and mixed_one_pool["bytes_per_token"] == 6 * 256
    full, sliding = (int(part.split()[0]) for part in mixed_two_groups["kv_blocks"].split(" + "))
    assert full == 32 and sliding <= 2 * (window_blocks(64) + 1)
    assert mixed_two_groups["bytes_per_token"] == (32 + 5 * sliding) * 16 * 256 / 512
    assert one_pool["bytes_per_token"] == two_groups["bytes_per_token"] == 18 * 1024  # 256 < the window


def test_gemma_two_groups_at_4k() -> None:
    # one pool: 18 layers x 1 KV head x 256 x K,V x bf16; two groups: 3 full layers keep all 4096
    # tokens, 15 sliding layers the 33 blocks a 512-token window spans
    assert GEMMA3_270M.single_pool_bytes(4096) == 18 * 1024 * 4096
    assert GEMMA3_270M.two_group_bytes(4096) == (3 * 4096 + 15 * 33 * 16) * 1024
    assert GEMMA3_270M.two_group_bytes(4096) / 4096 == 5052
