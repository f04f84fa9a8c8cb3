"""The engine's quality probes (``tools/engine_quality.py``): the text is in the tree, and the prompts
start with the chats the SmolLM2 tests check. ``chunked_perplexity`` runs in the slow
tests/backends/engine/test_kv_cache_dtype_smollm2.py."""

from __future__ import annotations

from tools.engine_quality import MESSAGES, PROMPTS, TEXT


def test_the_text_is_in_the_tree() -> None:
    text = TEXT.read_text()
    assert text.startswith("PRIDE AND PREJUDICE") and "public domain" in text


def test_the_prompts_are_chats_and_start_with_the_reference_ones() -> None:
    assert PROMPTS[: len(MESSAGES)] == MESSAGES and len(PROMPTS) > len(MESSAGES)
    assert all(m and all({"role", "content"} <= set(turn) for turn in m) for m in PROMPTS)
