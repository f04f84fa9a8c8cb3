"""bench/tiers.py (quoted in docs/routing.md): its fixed prompt set and its per-pool arithmetic.

The whole run (two models behind a gateway) is what `python bench/tiers.py` does by hand; the
end-to-end path it drives is covered by tests/e2e/test_make_run.py.
"""

from __future__ import annotations

import tiers


def test_the_prompt_set_is_fixed_and_mixed() -> None:
    work = tiers.prompts(2)
    assert len(work) == 16 and len({kind for kind, _ in work}) == 8
    assert work == tiers.prompts(2)  # the same prompts, in the same order, every run


def test_summary_per_pool_and_in_all() -> None:
    samples = [
        tiers.Sample("small", 100.0, 20.0, 10, 5, 0.001),
        tiers.Sample("small", 300.0, 30.0, 10, 5, 0.003),
        tiers.Sample("large", 500.0, 10.0, 10, 5, 0.010),
        tiers.Sample("large", 700.0, None, 10, 5, 0.010),
    ]
    rows = tiers.summarise("test", samples)
    assert rows["small"] == {
        "share": 0.5,
        "ttft_p50_ms": 200.0,
        "decode_tok_s": 25.0,
        "usd_per_1k_requests": 2.0,
    }
    assert rows["large"]["decode_tok_s"] == 10.0  # type: ignore[index]
    assert rows["all"] == {"ttft_p50_ms": 400.0, "usd_per_1k_requests": 6.0, "output_tokens": 20}
