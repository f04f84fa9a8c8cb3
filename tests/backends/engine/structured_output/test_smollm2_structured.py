"""Structured outputs from the real SmolLM2-135M-Instruct GGUF (slow: ~1 min): every schema of the shared
set validates, and a choice or regex picks a sensible answer when the model knows one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import jsonschema
import pytest

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from backends.engine.structured_output import StructuredOutput
from tools.structured_schemas import SCHEMAS, schema_text

pytestmark = pytest.mark.slow

ASKS = {
    "person": "Make up a person living in Paris: name, age, email and address.",
    "sentiment": "Classify the sentiment of: 'I loved this film, the actors were wonderful.'",
    "invoice": "Write an invoice with two lines for office supplies.",
    "weather_query": "I want the weather in Tokyo tomorrow, 2026-12-06, in celsius.",
    "shape": "Describe a circle of radius 3.",
    "todo_list": "Plan my Saturday as a short to-do list.",
}


@pytest.fixture(scope="module")
def engine() -> Iterator[LLMEngine]:
    engine = LLMEngine(EngineConfig(model="smollm2-135m", kv_cache_bytes=128 << 20, device="cpu"))
    yield engine
    engine.close()


def chat(engine: LLMEngine, text: str) -> list[int]:
    rendered = engine.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return engine.tokenizer.encode(rendered)


def test_every_schema_validates(engine: LLMEngine) -> None:
    prompts = [chat(engine, ASKS[name] + " Answer in JSON.") for name in SCHEMAS]
    params = [
        SamplingParams(temperature=0, max_tokens=300, structured=StructuredOutput(json_schema=schema_text(n)))
        for n in SCHEMAS
    ]
    outputs = engine.generate(prompts, params)
    for name, out in zip(SCHEMAS, outputs, strict=True):
        completion = out.outputs[0]
        assert completion.finish_reason == "stop", (name, completion.text)
        jsonschema.validate(json.loads(completion.text), SCHEMAS[name])


def test_choice_and_regex_answers(engine: LLMEngine) -> None:
    """The mask picks among what the model would say: the right city, as a word or in a sentence."""
    choice = StructuredOutput(choice=("Berlin", "Madrid", "Paris", "Rome"))
    sentence = StructuredOutput(regex=r"The capital of France is [A-Z][a-z]+\.")
    year = StructuredOutput(regex=r"[0-9]{4}")
    outputs = engine.generate(
        [
            chat(engine, "What is the capital of France? Answer with the city's name only."),
            chat(engine, "Which city is the capital of France?"),
            chat(engine, "In which year did World War II end?"),
        ],
        [SamplingParams(temperature=0, max_tokens=12, structured=s) for s in (choice, sentence, year)],
    )
    texts = [out.outputs[0].text for out in outputs]
    assert texts[:2] == ["Paris", "The capital of France is Paris."]
    assert re.fullmatch(r"19[0-9]{2}", texts[2])
