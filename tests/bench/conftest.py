"""Puts ``bench/`` on sys.path, as ``python bench/overhead.py`` does, so tests import ``harness.*``.

``bench/`` is a folder of scripts, not a package: importing ``bench.harness`` here would give mypy
the same files under two module names.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from tests.support.tier_corpus import shipped_model_bytes, small_corpus, tiers_jsonl  # noqa: E402

__all__ = ["shipped_model_bytes", "small_corpus", "tiers_jsonl"]
