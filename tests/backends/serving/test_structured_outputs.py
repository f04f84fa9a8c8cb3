"""Structured outputs through the server over the real engine (a tiny random Llama): response_format
(json_schema, json_object), vLLM's structured_outputs and guided_* fields, on chat and completions,
plain and streamed; the openai SDK's ``parse`` gives a pydantic object; bad constraints are 400s naming
the field. A random model writes valid JSON here only because the grammar masks its logits."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.structured_output.compiler import GrammarCompilerConfig
from backends.serving.app import create_app
from tests.backends.engine.tiny import build_tiny_model
from tests.backends.serving.harness import assert_error, post, serve
from tools.structured_schemas import SCHEMAS, bounded

BOUNDED = {name: bounded(schema, 16) for name, schema in SCHEMAS.items()}
"""The schemas with free-text strings cut to 16 characters: a random model may ramble in one for good."""
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
MESSAGES: Any = [{"role": "user", "content": "Reply in JSON."}]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tiny = build_tiny_model(tmp_path_factory.mktemp("structured-server") / "llama", "gqa")
    config = EngineConfig(model=str(tiny), device="cpu", kv_cache_bytes=4 << 20, num_threads=1)
    # little whitespace between JSON tokens: a random model otherwise spends its tokens on it
    engine = LLMEngine(config, grammar_config=GrammarCompilerConfig(max_whitespace=2))
    with serve(create_app(AsyncLLMEngine(engine), served_model_name="tiny")) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def body(path: str, **fields: Any) -> dict[str, Any]:
    start: dict[str, Any] = {"messages": MESSAGES} if path == CHAT else {"prompt": "Reply in JSON."}
    return {"model": "tiny", "max_tokens": 400, "temperature": 0, **start, **fields}


def text_of(path: str, response: Any) -> str:
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    return str(choice["message"]["content"] if path == CHAT else choice["text"])


class Line(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-[0-9]{3}$")
    quantity: int = Field(ge=1, le=9)


class Order(BaseModel):
    customer: str = Field(min_length=1, max_length=12)
    status: Literal["open", "shipped"]
    lines: list[Line] = Field(max_length=2)


def test_the_sdk_parses_a_pydantic_model(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model="tiny", messages=MESSAGES, response_format=Order, max_tokens=400, temperature=0
    )
    order = completion.choices[0].message.parsed
    assert isinstance(order, Order) and completion.choices[0].finish_reason == "stop"
    assert order.status in ("open", "shipped") and len(order.lines) <= 2


def response_format(name: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": BOUNDED[name], "strict": True}}


JSON_FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    (CHAT, "invoice", {"response_format": response_format("invoice")}),
    (CHAT, "person", {"structured_outputs": {"json": json.dumps(BOUNDED["person"])}}),  # vLLM takes text too
    (TEXT, "shape", {"guided_json": BOUNDED["shape"]}),
    (TEXT, "weather_query", {"structured_outputs": {"json": BOUNDED["weather_query"]}}),
]


@pytest.mark.parametrize(("path", "name", "fields"), JSON_FIELDS, ids=lambda v: str(v)[:30])
def test_json_schema_in_every_field(base_url: str, path: str, name: str, fields: dict[str, Any]) -> None:
    text = text_of(path, post(base_url, path, body(path, **fields)))
    jsonschema.validate(json.loads(text), BOUNDED[name])


@pytest.mark.parametrize("path", [CHAT, TEXT])
def test_regex_choice_grammar_and_json_object(base_url: str, path: str) -> None:
    assert re.fullmatch(
        r"[A-Z][a-z]{2,5}", text_of(path, post(base_url, path, body(path, guided_regex=r"[A-Z][a-z]{2,5}")))
    )
    assert text_of(path, post(base_url, path, body(path, guided_choice=["red", "blue"]))) in ("red", "blue")
    choice = body(path, structured_outputs={"choice": ["up", "down"]}, temperature=1.0, seed=4)
    assert text_of(path, post(base_url, path, choice)) in ("up", "down")
    grammar = 'root ::= "n=" [1-9] [0-9]?'
    assert re.fullmatch(
        r"n=[1-9][0-9]?", text_of(path, post(base_url, path, body(path, guided_grammar=grammar)))
    )
    assert isinstance(
        json.loads(text_of(path, post(base_url, path, body(path, response_format={"type": "json_object"})))),
        dict,
    )


def test_a_stream_concatenates_to_valid_json(client: openai.OpenAI) -> None:
    schema = BOUNDED["todo_list"]
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=400,
        temperature=0,
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "todo", "schema": schema}},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), schema)


def test_n_choices_and_a_length_cut(client: openai.OpenAI) -> None:
    schema = BOUNDED["sentiment"]
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    many = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=400, n=3, seed=1, response_format=response_format
    )
    for choice in many.choices:
        assert choice.finish_reason == "stop" and choice.message.content is not None
        jsonschema.validate(json.loads(choice.message.content), schema)
    cut = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=3, temperature=0, response_format=response_format
    )
    assert cut.choices[0].finish_reason == "length" and (cut.choices[0].message.content or "").startswith("{")


SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        CHAT,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "frobnicate"}},
            }
        },
        "response_format",
    ),
    (CHAT, {"response_format": {"type": "xml"}}, "response_format"),
    (CHAT, {"response_format": "json"}, "response_format"),
    (CHAT, {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}},
        "response_format.json_schema.schema",
    ),
    (CHAT, {"response_format": SCHEMA_FORMAT, "guided_regex": "a+"}, "guided_regex"),
    (CHAT, {"guided_json": {"type": "object"}, "guided_choice": ["a"]}, "guided_choice"),
    (TEXT, {"guided_regex": "a(b"}, "guided_regex"),
    (TEXT, {"guided_grammar": "root ::= nothing_defined"}, "guided_grammar"),
    (TEXT, {"guided_choice": []}, "guided_choice"),
    (TEXT, {"guided_json": "{not json"}, "guided_json"),
    (TEXT, {"structured_outputs": {}}, "structured_outputs"),
    (TEXT, {"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
    (TEXT, {"structured_outputs": {"regexp": "a"}}, "structured_outputs"),
    (TEXT, {"structured_outputs": {"json": {"$ref": "#/$defs/nowhere"}}}, "structured_outputs"),
]


@pytest.mark.parametrize(("path", "fields", "param"), BAD, ids=lambda v: str(v)[:50])
def test_bad_constraints_are_400s_naming_the_field(
    base_url: str, path: str, fields: dict[str, Any], param: str
) -> None:
    for stream in (False, True):
        response = post(base_url, path, body(path, stream=stream, **fields))
        assert_error(response, 400, param=param)
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert ".cc:" not in response.json()["error"]["message"]


def test_text_format_and_nulls_are_free_text(base_url: str) -> None:
    for fields in ({"response_format": {"type": "text"}}, {"guided_json": None, "structured_outputs": None}):
        response = post(base_url, CHAT, body(CHAT, max_tokens=4, **fields))
        assert response.status_code == 200, response.text
