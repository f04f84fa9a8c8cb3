"""Tool calling through the HTTP app: the in-memory engine twin replays scripted replies (calls, text,
malformed calls) for the parsing, streaming and validation contract; a tiny random Llama shows that a
forced call's mask makes even random weights answer with valid calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.serving.app import create_app
from tests.backends.engine.tiny import build_tiny_model
from tests.backends.serving.fake_engine import MODEL, FakeAsyncEngine, FakeEmbedder
from tests.backends.serving.harness import assert_error, chat, post, serve
from tests.backends.serving.tools.samples import MALFORMED, ONE, REPLIES, TIME, TOOLS, WEATHER

CHAT = "/v1/chat/completions"
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
USER: Any = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def fake() -> FakeAsyncEngine:
    engine = FakeAsyncEngine(max_waiting=4)
    engine.engine.max_model_len = 4096  # one token a byte: the tools section alone is ~1k
    return engine


@pytest.fixture(scope="module")
def base_url(fake: FakeAsyncEngine) -> Iterator[str]:
    with serve(create_app(fake, embedder=FakeEmbedder())) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


def function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return calls  # type: ignore[return-value]


def replying(fake: FakeAsyncEngine, text: str) -> None:
    fake.reply = text.encode()


def last_prompt(fake: FakeAsyncEngine) -> str:
    return bytes(fake.calls[-1]["prompt"]).decode()


def streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[str | None, list[dict[str, str]], str | None]:
    """Content, calls and finish reason of a stream, put together as a client does from the deltas."""
    content, finish = "", None
    calls: list[dict[str, str]] = []
    roles = []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        choice = chunk.choices[0]
        roles.append(choice.delta.role)
        content += choice.delta.content or ""
        for piece in choice.delta.tool_calls or []:
            if piece.index == len(calls):
                assert piece.id and piece.type == "function" and piece.function and piece.function.name
                calls.append(
                    {"id": piece.id, "name": piece.function.name, "arguments": piece.function.arguments or ""}
                )
            else:
                assert piece.id is None and piece.function is not None
                calls[piece.index]["arguments"] += piece.function.arguments or ""
        finish = choice.finish_reason or finish
    assert roles[0] == "assistant" and all(r is None for r in roles[1:])
    return content or None, calls, finish


def test_a_call_is_message_tool_calls(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    replying(fake, ONE)
    answer = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = function_calls(choice.message)
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Paris",
        "days": 3,
    }
    prompt = last_prompt(fake)  # the twin's template reads no tools: the Hermes fallback
    assert prompt.startswith("<|im_start|>system\n# Tools\n") and '"name": "get_weather"' in prompt


@pytest.mark.parametrize(
    "name", ["one", "two", "text_around", "compact", "arguments_first", "nested", "plain"]
)
def test_the_stream_reassembles_into_the_plain_answer(
    client: openai.OpenAI, fake: FakeAsyncEngine, name: str
) -> None:
    replying(fake, REPLIES[name])
    plain = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
    content, calls, finish = streamed(client, model=MODEL, messages=USER, tools=TOOLS)
    assert content == plain.message.content and finish == plain.finish_reason
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in function_calls(plain.message)
    ]
    assert "<tool_call>" not in (content or "") and "</tool_call>" not in (content or "")
    assert finish == ("tool_calls" if calls else "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_without_parallel_calls_only_the_first_is_kept(
    client: openai.OpenAI, fake: FakeAsyncEngine, stream: bool
) -> None:
    replying(fake, REPLIES["two"])
    kwargs: Any = {"model": MODEL, "messages": USER, "tools": TOOLS, "parallel_tool_calls": False}
    if stream:
        _, calls, finish = streamed(client, **kwargs)
        names = [c["name"] for c in calls]
    else:
        choice = client.chat.completions.create(**kwargs).choices[0]
        names, finish = [c.function.name for c in function_calls(choice.message)], choice.finish_reason
    assert names == ["get_weather"] and finish == "tool_calls"
    assert "Call at most one function in a reply." in last_prompt(fake)


def test_a_stream_loses_no_logprobs_to_held_text(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    replying(fake, REPLIES["text_around"])
    stream = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLS, logprobs=True, top_logprobs=1, stream=True
    )
    entries = []
    for chunk in stream:
        logprobs = chunk.choices[0].logprobs
        entries += (logprobs.content or []) if logprobs is not None else []
    assert len(entries) == len(REPLIES["text_around"].encode())  # the twin writes a token a byte


def test_text_around_a_call_is_the_content(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    replying(fake, REPLIES["text_around"])
    choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
    assert choice.message.content == "Let me look.\n\nDone, ünïcode 😀 after."
    assert len(function_calls(choice.message)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_malformed_call_in_auto_is_content(
    client: openai.OpenAI, fake: FakeAsyncEngine, stream: bool
) -> None:
    replying(fake, MALFORMED["not_json"])
    if stream:
        content, calls, finish = streamed(client, model=MODEL, messages=USER, tools=TOOLS)
        assert calls == []
    else:
        choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
        content, finish = choice.message.content, choice.finish_reason
        assert not choice.message.tool_calls
    assert (content, finish) == (MALFORMED["not_json"], "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_is_the_call_so_far_streamed_or_not(
    client: openai.OpenAI, fake: FakeAsyncEngine, stream: bool
) -> None:
    """As OpenAI answers it: the call, its arguments as far as they came, finish reason ``length``;
    never the markup as content."""
    replying(fake, ONE)
    cut = ONE.index('"Paris"') + 3  # one byte a token: the reply stops inside the city's name
    asked: Any = {
        "model": MODEL,
        "messages": USER,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": cut,
    }
    if stream:
        content, calls, finish = streamed(client, **asked)
    else:
        choice = client.chat.completions.create(**asked).choices[0]
        content, finish = choice.message.content, choice.finish_reason
        calls = [
            {"name": c.function.name, "arguments": c.function.arguments}
            for c in function_calls(choice.message)
        ]
    assert (content or None, finish) == (None, "length")
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Pa')]


def test_choice_none_neither_shows_nor_reads_calls(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    replying(fake, ONE)
    choice = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLS, tool_choice="none"
    ).choices[0]
    assert choice.message.content == ONE and not choice.message.tool_calls and choice.finish_reason == "stop"
    assert "# Tools" not in last_prompt(fake)
    assert fake.calls[-1]["params"].structured is None


def test_the_history_renders_calls_and_results(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    replying(fake, "It is sunny.")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
    }
    messages: Any = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]  # fmt: skip
    choice = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS).choices[0]
    assert choice.message.content == "It is sunny." and choice.finish_reason == "stop"
    prompt = last_prompt(fake)
    block = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{block}<|im_end|>" in prompt
    assert (
        "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        in prompt
    )


@pytest.mark.parametrize(
    ("choice", "mode"),
    [("required", "required"), ({"type": "function", "function": {"name": "get_time"}}, "named")],
)
def test_a_forced_choice_sends_the_engine_a_structural_tag(
    base_url: str, fake: FakeAsyncEngine, choice: Any, mode: str
) -> None:
    replying(fake, ONE)
    response = post(base_url, CHAT, chat(tools=TOOLS, tool_choice=choice, parallel_tool_calls=False))
    assert response.status_code == 200, response.text
    structured = fake.calls[-1]["params"].structured
    assert structured is not None and structured.structural_tag is not None
    tags = json.loads(structured.structural_tag)["format"]["tags"]
    names = [json.loads(t["begin"].removeprefix("<tool_call>\n") + "0}")["name"] for t in tags]
    assert names == (["get_weather", "get_time"] if mode == "required" else ["get_time"])


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            None,
        ),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", None),
        ({"tool_choice": "required"}, "tool_choice", None),
        ({"tool_choice": "auto"}, "tool_choice", None),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools", None),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "tools",
            None,
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"properties": {"a": {"type": 7}}}},
                    }
                ]
            },
            "tools",
            None,
        ),
        ({"tools": {"get_time": {}}}, "tools", None),
        ({"tools": TOOLS, "parallel_tool_calls": "no"}, "parallel_tool_calls", None),
        ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
        ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_tool_fields_are_400s_naming_the_field(
    base_url: str, fields: dict[str, Any], param: str, code: str | None
) -> None:
    for stream in (False, True):
        assert_error(post(base_url, CHAT, chat(stream=stream, **fields)), 400, code, param)


def test_bad_arguments_in_the_history_are_a_400(base_url: str) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{not json"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    assert_error(
        post(base_url, CHAT, chat(messages=messages, tools=TOOLS)), 400, None, "messages[1].tool_calls"
    )


# --------------------------------------------------------------------------- forced calls, random weights


@pytest.fixture(scope="module")
def tiny_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = build_tiny_model(tmp_path_factory.mktemp("tools-tiny") / "llama", "gqa")
    config = EngineConfig(
        model=str(path),
        device="cpu",
        kv_cache_bytes=4 << 20,
        num_threads=1,
        max_model_len=2048,
        max_num_seqs=2,
    )
    with serve(create_app(AsyncLLMEngine(LLMEngine(config), max_waiting=2), served_model_name="tiny")) as url:
        yield url


@pytest.fixture
def tiny(tiny_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{tiny_url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def assert_valid(name: str, arguments: str, allowed: set[str]) -> None:
    assert name in allowed
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("seed", [0, 1])
def test_required_makes_random_weights_call_a_tool(tiny: openai.OpenAI, seed: int) -> None:
    choice = tiny.chat.completions.create(
        model="tiny", messages=USER, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=400, seed=seed, temperature=1.0,
    ).choices[0]  # fmt: skip
    assert choice.finish_reason == "tool_calls", choice
    [call] = function_calls(choice.message)
    assert_valid(call.function.name, call.function.arguments, {"get_weather", "get_time"})


def test_a_named_choice_streams_that_call(tiny: openai.OpenAI) -> None:
    content, calls, finish = streamed(
        tiny, model="tiny", messages=USER, tools=TOOLS, max_tokens=400, seed=3, temperature=1.0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    assert finish == "tool_calls" and content is None and len(calls) >= 1
    for call in calls:
        assert_valid(call["name"], call["arguments"], {"get_weather"})
