"""The batch bitmask: constrained rows masked to what their grammar allows, free rows untouched, and a
speculative step's rows masked position by position."""

from __future__ import annotations

import pytest
import torch

from backends.engine.structured_output import StructuredOutput
from backends.engine.structured_output.bitmask import apply_grammars, mask_draft
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


def finite(row: torch.Tensor) -> set[int]:
    return set(torch.isfinite(row).nonzero().flatten().tolist())


def test_only_constrained_rows_are_masked(compiler: GrammarCompiler, tokenizer: Tokenizer) -> None:
    digits = SequenceGrammar(compiler.compile(StructuredOutput(regex="[0-9]+")))
    yes_no = SequenceGrammar(compiler.compile(StructuredOutput(choice=("yes", "no"))))
    logits = torch.randn(3, VOCAB_SIZE)
    free_row = logits[1].clone()
    apply_grammars(logits, [digits, None, yes_no])
    assert finite(logits[0]) == set(tokenizer.encode("0123456789"))
    assert torch.equal(logits[1], free_row)
    assert finite(logits[2]) == set(tokenizer.encode("yn"))


def test_inference_tensors_are_masked_in_place(compiler: GrammarCompiler, tokenizer: Tokenizer) -> None:
    with torch.inference_mode():  # what the model runner returns
        logits = torch.zeros(1, VOCAB_SIZE)
    apply_grammars(logits, [SequenceGrammar(compiler.compile(StructuredOutput(regex="a")))])
    assert finite(logits[0]) == set(tokenizer.encode("a"))


def test_a_draft_is_cut_and_each_row_masked(compiler: GrammarCompiler, tokenizer: Tokenizer) -> None:
    grammar = SequenceGrammar(compiler.compile(StructuredOutput(regex="ab[0-9]")))
    a, b, x = tokenizer.encode("abx")
    logits = torch.randn(4, VOCAB_SIZE).to(torch.bfloat16)
    rows, kept = mask_draft(logits, [a, b, x], grammar)
    assert kept == [a, b] and rows.shape == (3, VOCAB_SIZE) and rows.dtype == torch.float32
    assert finite(rows[0]) == {a} and finite(rows[1]) == {b}
    assert finite(rows[2]) == set(tokenizer.encode("0123456789"))
    assert grammar.num_accepted == 0 and grammar.accept(a)
