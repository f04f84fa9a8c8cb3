"""Draft and acceptance counters."""

from __future__ import annotations

from backends.engine.spec_decode.stats import SpecDecodeStats


def test_counts_drafts_tokens_and_positions() -> None:
    stats = SpecDecodeStats()
    assert stats.acceptance_rate == 0.0 and stats.mean_accepted_length == 1.0
    stats.observe(4, 2)
    stats.observe(3, 3)
    stats.observe(4, 0)
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (3, 11, 5)
    assert stats.accepted_per_pos == [2, 2, 1, 0]
    assert stats.acceptance_rate == 5 / 11
    assert stats.mean_accepted_length == 1 + 5 / 3
