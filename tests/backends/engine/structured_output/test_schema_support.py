"""unenforced_keyword: each refused rule is a schema whose violating document the installed xgrammar's
grammar accepts (so the refusal is needed, and a newer xgrammar that enforces it fails here); annotations,
the project's schemas and what xgrammar does enforce pass; the walk survives deep and recursive schemas;
a refused schema is a 400 naming ``response_format`` (or ``tools`` for a forced call) over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.structured_output import schema_support
from backends.engine.structured_output.compiler import json_schema_grammar
from backends.engine.structured_output.schema_support import (
    UnsupportedSchemaError,
    check_enforceable,
    unenforced_keyword,
)
from backends.serving.app import create_app
from tests.backends.engine.structured_output.conftest import GRAMMAR_CONFIG
from tests.backends.serving.harness import assert_error, post, serve
from tools.structured_schemas import SCHEMAS, bounded

INT = {"type": "integer"}
AB = {"a": INT, "b": INT}
OBJ = {"type": "object", "properties": AB}
DRAFT_7 = "http://json-schema.org/draft-07/schema#"
DEFS = {"p": {"type": "integer", "minimum": 3}}
REFUSED: list[tuple[str, dict[str, Any], Any]] = [
    # (the keyword the message names, the schema, a document that violates it)
    ("multipleOf", {"type": "integer", "multipleOf": 7, "minimum": 10}, 123),
    ("multipleOf", {"type": "integer", "multipleOf": 7, "exclusiveMaximum": 100}, 15),
    ("multipleOf", {"type": "number", "multipleOf": 0.5}, 0.3),
    ("multipleOf", {"type": "integer", "multipleOf": 2.5}, 4),
    ("uniqueItems", {"type": "array", "items": {"enum": [1, 2]}, "minItems": 2, "uniqueItems": True}, [2, 2]),
    ("contains", {"type": "array", "items": INT, "contains": {"const": 42}}, [131]),
    ("not", {"type": "string", "not": {"enum": ["Hi", "Hello"]}}, "Hello"),
    ("dependentRequired", {**OBJ, "dependentRequired": {"a": ["b"]}}, {"a": 1}),
    ("dependentSchemas", {**OBJ, "dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1}),
    ("dependencies", {**OBJ, "$schema": DRAFT_7, "dependencies": {"a": ["b"]}}, {"a": 1}),
    ("if", {**OBJ, "if": {"required": ["a"]}, "then": {"required": ["b"]}}, {"a": 1}),
    ("format: regex", {"type": "string", "format": "regex"}, "[a"),
    ("format: idn-email", {"type": "string", "format": "idn-email"}, "ab"),
    ("allOf", {"allOf": [INT, {"minimum": 5}]}, 4),
    ("allOf", {"type": "integer", "allOf": [{"minimum": 5}]}, 4),
    ("maximum", {"$defs": DEFS, "$ref": "#/$defs/p", "maximum": 5}, 9),
    ("type", {"type": "integer", "anyOf": [{"minimum": 5}, {"maximum": 0}]}, "s"),
    ("minLength", {"type": "string", "enum": ["a", "bb"], "minLength": 2}, "a"),
    ("enum", {"type": "string", "enum": ["a", 1]}, 1),
    ("pattern", {"type": "string", "format": "email", "pattern": "^z"}, "a@b.co"),
    ("minLength", {"type": "string", "format": "email", "minLength": 10}, "a@b.co"),
    ("maxLength", {"type": "string", "pattern": "^a+$", "maxLength": 2}, "aaa"),
    ("minLength", {"minLength": 3}, "a"),
    ("minimum", {"minimum": 5}, 4),
    ("required", {"type": "object", "additionalProperties": INT, "required": ["a"]}, {"b": 1}),
    ("propertyNames", {**OBJ, "propertyNames": {"enum": ["a"]}}, {"b": 1}),
]  # fmt: skip
ACCEPTED: list[dict[str, Any]] = [
    {"type": "integer", "title": "t", "description": "d", "examples": [1], "default": 2, "$comment": "c"},
    {"type": ["integer", "null"], "multipleOf": 7},
    {"type": "array", "items": INT, "uniqueItems": False, "minItems": 1, "maxItems": 3},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "password", "pattern": "^a"},  # an unknown format is an annotation
    {"type": "string", "enum": ["a", "b"]},
    {"const": 3, "type": "integer", "description": "pydantic's Literal"},
    {"$defs": DEFS, "$ref": "#/$defs/p", "title": "x", "default": 4},
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    {"allOf": [{"$ref": "#/$defs/p"}], "description": "pydantic v1", "$defs": DEFS},
    {"anyOf": [INT, {"type": "null"}], "default": None},
    {**OBJ, "required": ["a"], "minProperties": 1, "additionalProperties": False},
    {"type": "object", "additionalProperties": INT, "propertyNames": {"pattern": "^[a-z]+$"}},
    {"type": "object", "patternProperties": {"^i_.*$": INT}},
    {"type": "array", "prefixItems": [INT], "unevaluatedItems": False},
    {"properties": AB, "required": ["a"]},  # untyped: xgrammar reads an object
    {"type": "array", "items": INT, "minContains": 2},  # no `contains`: constrains nothing
]


def grammar_accepts(schema: dict[str, Any], document: Any) -> bool:
    grammar = xgr.Grammar.from_ebnf(json_schema_grammar(json.dumps(schema), None))
    return bool(_is_grammar_accept_string(grammar, json.dumps(document)))


@pytest.mark.parametrize(("keyword", "schema", "violating"), REFUSED, ids=lambda v: str(v)[:40])
def test_each_refusal_is_a_violation_xgrammar_lets_through(keyword: str, schema: Any, violating: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(violating, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert grammar_accepts(schema, violating)  # if this fails, xgrammar enforces it now: lift the rule
    problem = unenforced_keyword({"type": "object", "properties": {"x y/z": schema}})
    assert problem is not None and f"`{keyword}" in problem and "(at #/properties/x y~1z)" in problem


@pytest.mark.parametrize("schema", ACCEPTED, ids=lambda v: json.dumps(v)[:40])
def test_what_xgrammar_enforces_passes(schema: dict[str, Any]) -> None:
    assert unenforced_keyword(schema) is None
    check_enforceable({"$defs": {"deep": {"type": "array", "items": schema}}})


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_projects_schemas_pass(name: str) -> None:
    assert unenforced_keyword(SCHEMAS[name]) is None
    assert unenforced_keyword(bounded(SCHEMAS[name], 16)) is None


def test_a_deep_schema_is_walked_without_recursion() -> None:
    schema: dict[str, Any] = {"type": "string", "not": {"const": "x"}}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(UnsupportedSchemaError, match="`not`") as info:
        check_enforceable(schema)
    assert len(str(info.value)) < 300  # the pointer is shortened, not 5000 segments long
    assert unenforced_keyword({"type": "array", "items": {"anyOf": [True, False, 3, "x", None]}}) is None


def test_a_huge_schema_is_refused_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_support, "MAX_NODES", 10)
    schema = {"type": "object", "properties": {str(i): INT for i in range(20)}}
    assert "too large" in (unenforced_keyword(schema) or "")


@pytest.fixture(scope="module")
def base_url(tiny_dirs: dict[str, Path]) -> Iterator[str]:
    config = EngineConfig(model=str(tiny_dirs["gqa"]), device="cpu", kv_cache_bytes=4 << 20, num_threads=1)
    engine = LLMEngine(config, grammar_config=GRAMMAR_CONFIG)
    with serve(create_app(AsyncLLMEngine(engine), served_model_name="tiny")) as url:
        yield url


MULTIPLE_OF = {"type": "object", "properties": {"a": REFUSED[0][1]}, "required": ["a"]}
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": MULTIPLE_OF}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": MULTIPLE_OF}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": SCHEMA_FORMAT}, "response_format"),
        ({"guided_json": MULTIPLE_OF}, "guided_json"),
        ({"tools": [TOOL], "tool_choice": "required"}, "tools"),
    ],
    ids=["response_format", "guided_json", "forced_tool"],
)  # fmt: skip
def test_an_unenforceable_schema_is_a_400_naming_the_field(
    base_url: str, fields: dict[str, Any], param: str
) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields}
    response = post(base_url, "/v1/chat/completions", body)
    assert_error(response, 400, param=param)
    message = response.json()["error"]["message"]
    assert message.startswith(f"Invalid '{param}': unsupported JSON Schema: `multipleOf`"), message
    assert "#/properties/a" in message and ".cc:" not in message
