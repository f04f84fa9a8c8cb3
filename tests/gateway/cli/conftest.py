"""Fixtures for the tier classifier tests (a small corpus built from the installed data packages)."""

from tests.support.tier_corpus import shipped_model_bytes, small_corpus, tiers_jsonl

__all__ = ["shipped_model_bytes", "small_corpus", "tiers_jsonl"]
