"""GrammarCompiler: every kind compiles, once (a bounded LRU), for the engine's own tokenizer; a bad
constraint is a GrammarError naming its kind, in words a client can read."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest
import xgrammar as xgr

from backends.engine.structured_output import StructuredOutput
from backends.engine.structured_output.compiler import (
    GrammarCompiler,
    GrammarCompilerConfig,
    build_tokenizer_info,
    json_schema_grammar,
    tag_schemas,
)
from backends.engine.structured_output.errors import GrammarError
from backends.engine.tokenizer import Tokenizer
from tests.backends.engine.tiny import EOS_ID, VOCAB_SIZE, byte_tokenizer
from tools.structured_schemas import SCHEMAS, schema_text

TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            {
                "begin": "<tool_call>",
                "content": {"type": "json_schema", "json_schema": SCHEMAS["weather_query"]},
                "end": "</tool_call>",
            }
        ],
    },
}
EVERY_KIND = [
    StructuredOutput(json_schema=schema_text("invoice")),
    StructuredOutput(json_object=True),
    StructuredOutput(regex=r"\d{3}"),
    StructuredOutput(choice=("yes", "no", 'with "quotes" and \\ and é')),
    StructuredOutput(grammar='root ::= "a" [0-9]+'),
    StructuredOutput(structural_tag=json.dumps(TAG)),
]
KINDS = ["json_schema", "json_object", "regex", "choice", "grammar", "structural_tag"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(byte_tokenizer(), eos_token_id=EOS_ID)


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> GrammarCompiler:
    return GrammarCompiler(tokenizer, VOCAB_SIZE)


def accepts(compiled: xgr.CompiledGrammar, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiled)
    return bool(matcher.accept_string(text)) and bool(matcher.is_completed())


def test_the_tokenizer_info_is_the_engines(tokenizer: Tokenizer) -> None:
    info = build_tokenizer_info(tokenizer, VOCAB_SIZE + 5)  # logits wider than the vocabulary
    assert info.vocab_size == VOCAB_SIZE + 5 and info.vocab_type == xgr.VocabType.BYTE_LEVEL
    assert info.stop_token_ids == [EOS_ID]
    assert set(info.special_token_ids) >= {257, 258}  # ChatML markers never come out of a grammar
    assert info.decoded_vocab[ord("a") - 33] == b"a"  # the byte alphabet decodes to its bytes


@pytest.mark.parametrize("spec", EVERY_KIND, ids=KINDS)
def test_every_kind_compiles_once(compiler: GrammarCompiler, spec: StructuredOutput) -> None:
    before = compiler.num_compiled
    first = compiler.compile(spec)
    assert compiler.compile(spec) is first  # the cache's, by value: an equal spec is a hit too
    assert compiler.compile(dataclasses.replace(spec)) is first
    assert compiler.num_compiled == before + 1


def test_compiled_grammars_accept_what_they_should(compiler: GrammarCompiler) -> None:
    choice = compiler.compile(EVERY_KIND[3])
    assert accepts(choice, 'with "quotes" and \\ and é') and not accepts(choice, "maybe")
    invoice = compiler.compile(EVERY_KIND[0])
    good = {
        "invoice_id": "123e4567-e89b-12d3-a456-426614174000",
        "lines": [{"sku": "ABC-123", "quantity": 2, "unit_price": 9.5}],
        "paid": True,
    }
    jsonschema.validate(good, SCHEMAS["invoice"])
    assert accepts(invoice, json.dumps(good))
    assert not accepts(invoice, json.dumps({**good, "lines": []}))  # minItems 1
    assert not accepts(invoice, json.dumps({"paid": True, **good}))  # properties come in the schema's order
    tag = compiler.compile(EVERY_KIND[5])
    assert accepts(
        tag,
        'Let me check. <tool_call>{"city": "Paris", "unit": "celsius", "date": "2026-12-05", '
        '"days": null}</tool_call>',
    )


def test_json_strings_are_strict_json(compiler: GrammarCompiler) -> None:
    """No raw control characters (xgrammar 0.2.8 lets length-bounded strings have them) and no lone
    surrogates: any JSON parser reads every output."""
    grammar = json_schema_grammar(json.dumps({"type": "string", "maxLength": 4}), None)
    assert "\\r\\n]" not in grammar
    bounded = compiler.compile(StructuredOutput(json_schema=json.dumps({"type": "string", "maxLength": 4})))
    assert accepts(bounded, '"ab c"') and not accepts(bounded, '"a\x01"') and not accepts(bounded, '"abcde"')
    matcher = xgr.GrammarMatcher(bounded)
    assert matcher.accept_string('"') and not matcher.accept_string(b"\xed\xad\x88")  # U+DB48


def test_the_cache_is_bounded(tokenizer: Tokenizer) -> None:
    compiler = GrammarCompiler(tokenizer, VOCAB_SIZE, GrammarCompilerConfig(max_cached_grammars=2))
    a, b, c = (StructuredOutput(regex=r) for r in ("a", "b", "c"))
    first_a = compiler.compile(a)
    compiler.compile(b)
    compiler.compile(a)  # a is the most recent now: c evicts b
    compiler.compile(c)
    assert compiler.compile(a) is first_a and compiler.num_compiled == 3
    compiler.compile(b)
    assert compiler.num_compiled == 4


@pytest.mark.parametrize(
    ("spec", "kind", "words"),
    [
        (StructuredOutput(json_schema='{"type": "frobnicate"}'), "json_schema", "frobnicate"),
        (StructuredOutput(json_schema="{not json"), "json_schema", "invalid json schema"),
        (StructuredOutput(json_schema="[1, 2]"), "json_schema", "object or a boolean"),
        (StructuredOutput(json_schema='{"$ref": "#/$defs/missing"}'), "json_schema", "missing"),
        (StructuredOutput(regex="a(b"), "regex", "parenthesis"),
        (StructuredOutput(choice=()), "choice", "non-empty"),
        (StructuredOutput(grammar="root ::= undefined_rule"), "grammar", "undefined_rule"),
        (StructuredOutput(structural_tag='{"type": "nope"}'), "structural_tag", "structural tag"),
        (StructuredOutput(json_schema='{"type": "string", "not": {"const": "a"}}'), "json_schema", "`not`"),
        (
            StructuredOutput(structural_tag=json.dumps(TAG).replace('"type": "object"', '"not": {}')),
            "structural_tag",
            "unsupported JSON Schema: `not`",
        ),
    ],
)
def test_bad_constraints_are_grammar_errors(
    compiler: GrammarCompiler, spec: StructuredOutput, kind: str, words: str
) -> None:
    before = compiler.num_compiled
    with pytest.raises(GrammarError) as info:
        compiler.compile(spec)
    assert isinstance(info.value, ValueError) and info.value.kind == kind
    message = str(info.value)
    assert words.lower() in message.lower() and ".cc:" not in message and "Check failed" not in message
    assert compiler.num_compiled == before  # never cached


def test_a_tags_schemas_are_found_for_checking() -> None:
    """Forced tool calls' argument schemas pass the same enforceability check as ``response_format``."""
    assert list(tag_schemas(json.dumps(TAG))) == [SCHEMAS["weather_query"]]
    legacy = {"structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}], "triggers": []}
    assert list(tag_schemas(json.dumps(legacy))) == [{"type": "integer"}]
    assert list(tag_schemas("{not json")) == []
