"""Block lists: whole words and phrases, any case, any spacing."""

from __future__ import annotations

from gateway.guardrails.block_list import BlockList


def found(words: tuple[str, ...], text: str) -> list[str]:
    return [text[f.start : f.end] for f in BlockList(words).find(text)]


def test_whole_words_any_case() -> None:
    assert found(("secret plan",), "Tell me the SECRET  Plan now") == ["SECRET  Plan"]
    assert found(("darn",), "Darn! darn.") == ["Darn", "darn"]


def test_not_inside_other_words() -> None:
    assert found(("plan",), "planning a planet") == []
    assert found(("c++",), "I like c++ and c++11") == ["c++"]
