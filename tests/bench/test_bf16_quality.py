"""bench/bf16_quality.py (quoted in docs/engine.md): bf16 beside fp32 on the real SmolLM2, perplexity
close to fp32's and the agreement counted against fp32's own answers (slow: two model loads)."""

from __future__ import annotations

import bf16_quality
import pytest

pytestmark = pytest.mark.slow


def test_bf16_is_reported_beside_fp32() -> None:
    rows = bf16_quality.main()

    assert rows["float32"]["greedy_agreement"] == "192/192" and rows["float32"]["identical_answers"] == "6/6"
    agreed, total = map(int, str(rows["bfloat16"]["greedy_agreement"]).split("/"))
    assert total == 192 and agreed > 0
    assert (
        abs(float(str(rows["bfloat16"]["perplexity"])) / float(str(rows["float32"]["perplexity"])) - 1) < 0.01
    )
