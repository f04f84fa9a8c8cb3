"""SequenceGrammar: advanced token by token, terminated by its stop token, and a speculative draft
checked position by position and rolled back."""

from __future__ import annotations

import pytest

from backends.engine.structured_output import StructuredOutput
from backends.engine.structured_output.bitmask import new_bitmask
from backends.engine.structured_output.compiler import GrammarCompiler
from backends.engine.structured_output.matcher import SequenceGrammar
from backends.engine.tokenizer import Tokenizer
from tests.backends.engine.tiny import EOS_ID, VOCAB_SIZE, byte_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(byte_tokenizer(), eos_token_id=EOS_ID)


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> GrammarCompiler:
    return GrammarCompiler(tokenizer, VOCAB_SIZE)


def ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text)


def allowed(bitmask, row: int) -> set[int]:  # type: ignore[no-untyped-def]
    return {t for t in range(VOCAB_SIZE) if (int(bitmask[row, t // 32]) >> (t % 32)) & 1}


def test_accept_until_terminated(compiler: GrammarCompiler, tokenizer: Tokenizer) -> None:
    grammar = SequenceGrammar(compiler.compile(StructuredOutput(choice=("yes", "no"))))
    assert not grammar.accept(ids(tokenizer, "x")[0])  # refused: the state is unchanged
    assert all(grammar.accept(t) for t in ids(tokenizer, "ye"))
    assert not grammar.is_completed and not grammar.accept(EOS_ID)  # eos only once complete
    assert grammar.accept(ids(tokenizer, "s")[0]) and grammar.is_completed and not grammar.is_terminated
    bitmask = new_bitmask(1, VOCAB_SIZE)
    grammar.fill_bitmask(bitmask, 0)
    assert allowed(bitmask, 0) == {EOS_ID}
    assert grammar.accept(EOS_ID) and grammar.is_terminated and grammar.num_accepted == 4


def test_draft_rows_follow_the_draft_and_roll_back(compiler: GrammarCompiler, tokenizer: Tokenizer) -> None:
    grammar = SequenceGrammar(compiler.compile(StructuredOutput(regex="ab[0-9]")))
    a, b, c, one = ids(tokenizer, "abc1")
    bitmask = new_bitmask(4, VOCAB_SIZE)
    assert grammar.fill_draft_bitmask(bitmask, [a, b, c]) == 2  # c is refused after "ab"
    assert allowed(bitmask, 0) == {a} and allowed(bitmask, 1) == {b}
    assert allowed(bitmask, 2) == set(ids(tokenizer, "0123456789"))
    assert grammar.num_accepted == 0 and grammar.accept(a)  # rolled back: "a" is next again
    bitmask = new_bitmask(4, VOCAB_SIZE)
    # a draft that would end the grammar stops before its stop token: the bonus row may sample it
    assert grammar.fill_draft_bitmask(bitmask, [b, one, EOS_ID]) == 2
    assert allowed(bitmask, 2) == {EOS_ID}
    assert grammar.fill_draft_bitmask(new_bitmask(2, VOCAB_SIZE), [257]) == 0  # a special token: refused
    assert grammar.accept(b) and grammar.accept(one) and grammar.accept(EOS_ID) and grammar.is_terminated
