"""Agents and offline batches against ``make run``'s stack (the reference engine behind the gateway, the
default policy, its store on a real Redis), with the clients they use: the openai SDK (tool calls
streamed, ``chat.completions.parse`` with a pydantic model, the Responses API and its stream, a
two-turn ``previous_response_id`` conversation), a LangChain agent whose tool is a Python function,
Anthropic's SDK, every SDK parameter honoured or refused, and the Batch API shared by two gateways and
resumed by a restarted one."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from tests.e2e.local_stack import LocalStack, extra_gateway, local_stack
from tests.e2e.sdk_parameters import NOT_FOUND, REFUSED, TABLES, WEATHER_TOOL, sdk_parameters

pytestmark = pytest.mark.slow

MODEL = "gpt-4o-mini"
"""An alias of the default policy's small pool: SmolLM2-135M-Instruct."""
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: Any = [WEATHER_TOOL]
WEATHER_SCHEMA = WEATHER_TOOL["function"]["parameters"]
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalStack]:
    """``make run`` with the policy's store on a real Redis (``SORTYARD_REDIS_URL``), as a platform runs
    it; this gateway serves the Batch API but runs no lines (``extra_gateway``s do, below)."""
    env = {"SORTYARD_REDIS_URL": redis_url}
    with local_stack(tmp_path_factory.mktemp("stack"), env, {"batches": {"concurrency": 0}}) as running:
        yield running


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0, timeout=120)


def test_a_forced_tool_call_streams_as_deltas_and_the_result_is_answered(client: openai.OpenAI) -> None:
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=120,
        stream=True,
    )
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in chunks:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.id
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls" and len(calls) == 1
    call = calls[0]
    assert call["name"] == "get_weather" and call["id"]
    jsonschema.validate(json.loads(call["arguments"]), WEATHER_SCHEMA)

    answer = client.chat.completions.create(
        model=MODEL,
        temperature=0,
        max_tokens=32,
        messages=[
            *ASK,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": call["arguments"]},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call["id"], "content": "22 degrees and sunny"},
        ],
        tools=TOOLS,
    )
    assert answer.choices[0].message.content


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population: int


def test_parse_gives_the_pydantic_model(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Give the name, country and population of Paris as JSON."}],
        response_format=City,
        temperature=0,
        max_tokens=128,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, City)


def test_the_responses_tour(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="What is the capital of France?", temperature=0)
    assert first.status == "completed" and "Paris" in first.output_text

    events = list(
        client.responses.create(
            model=MODEL, input="What is the capital of France?", temperature=0, stream=True
        )
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == first.output_text

    second = client.responses.create(
        model=MODEL, input="Say that again, in one word.", previous_response_id=first.id, temperature=0
    )
    assert second.status == "completed" and second.output_text
    items = client.responses.input_items.list(second.id)
    assert any("capital of France" in json.dumps(item.model_dump()) for item in items.data)
    assert client.responses.retrieve(first.id).output_text == first.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_a_langchain_agent_calls_a_python_function_and_uses_its_result(stack: LocalStack) -> None:
    from langchain_core.messages import BaseMessage, HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    asked: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"It is 22 degrees and sunny in {city}."

    key = SecretStr(stack.api_key)
    llm = ChatOpenAI(model=MODEL, base_url=stack.base_url, api_key=key, temperature=0, max_retries=0)
    agent = llm.bind_tools([get_weather], tool_choice="get_weather")
    messages: list[BaseMessage] = [HumanMessage("What is the weather in Paris?")]
    decision = agent.invoke(messages)
    assert decision.tool_calls and decision.tool_calls[0]["name"] == "get_weather"
    messages.append(decision)
    messages += [get_weather.invoke(call) for call in decision.tool_calls]
    final = llm.bind_tools([get_weather]).invoke(messages)
    assert asked and isinstance(final.content, str) and final.content
    assert not final.tool_calls


@pytest.mark.parametrize("endpoint", sorted(TABLES))
def test_the_tables_cover_the_sdk(endpoint: str) -> None:
    method, table = TABLES[endpoint]
    assert sdk_parameters(method) == set(table)


_BASE: dict[str, dict[str, Any]] = {
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
    "completions": {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4},
    "embeddings": {"model": "text-embedding-3-small", "input": "hello"},
    "responses": {"model": MODEL, "input": "Say hello.", "max_output_tokens": 16},
}


def _send(client: openai.OpenAI, endpoint: str, arguments: dict[str, Any]) -> None:
    create: Any = {
        "chat": client.chat.completions.create,
        "completions": client.completions.create,
        "embeddings": client.embeddings.create,
        "responses": client.responses.create,
    }[endpoint]
    answer = create(**{**_BASE[endpoint], **arguments})
    if arguments.get("stream"):
        assert list(answer)  # the whole stream arrives


@pytest.mark.parametrize(
    ("endpoint", "param"), [(endpoint, param) for endpoint, (_, table) in TABLES.items() for param in table]
)
def test_every_sdk_parameter_is_honoured_or_refused(client: openai.OpenAI, endpoint: str, param: str) -> None:
    verdict, arguments = TABLES[endpoint][1][param]
    if verdict in (REFUSED, NOT_FOUND):
        error = openai.BadRequestError if verdict == REFUSED else openai.NotFoundError
        with pytest.raises(error) as refused:
            _send(client, endpoint, arguments)
        body = refused.value.body
        assert isinstance(body, dict) and body.get("param") == param, body
    else:
        _send(client, endpoint, arguments)


def test_anthropics_sdk_plain_streamed_a_tool_use_loop_and_count_tokens(stack: LocalStack) -> None:
    import anthropic

    client = anthropic.Anthropic(
        base_url=stack.base_url.removesuffix("/v1"), api_key=stack.api_key, max_retries=0
    )
    question: Any = [{"role": "user", "content": "What is the capital of France?"}]
    greedy: Any = {"temperature": 0}  # the SDK no longer takes it by name; the route still does
    message = client.messages.create(model=MODEL, max_tokens=16, messages=question, extra_body=greedy)
    answer: Any = message.content[0]
    assert message.stop_reason in ("end_turn", "max_tokens") and "Paris" in answer.text
    with client.messages.stream(model=MODEL, max_tokens=16, messages=question, extra_body=greedy) as stream:
        streamed = "".join(stream.text_stream)
    assert streamed == answer.text

    tool: Any = {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "input_schema": WEATHER_SCHEMA,
    }
    choose: Any = {"type": "tool", "name": "get_weather"}
    turns: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    decision = client.messages.create(
        model=MODEL,
        max_tokens=120,
        messages=turns,
        tools=[tool],
        tool_choice=choose,
        extra_body=greedy,
    )
    use: Any = next(block for block in decision.content if block.type == "tool_use")
    assert decision.stop_reason == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER_SCHEMA)
    turns += [
        {"role": "assistant", "content": [block.model_dump() for block in decision.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "22 degrees"}],
        },
    ]
    final = client.messages.create(
        model=MODEL, max_tokens=32, messages=turns, tools=[tool], extra_body=greedy
    )
    assert final.content and final.content[0].type == "text" and final.stop_reason != "tool_use"
    counted = client.messages.count_tokens(model=MODEL, messages=question)
    assert 0 < counted.input_tokens
    with pytest.raises(anthropic.BadRequestError):  # extended thinking: no chat server has it
        client.messages.create(
            model=MODEL, max_tokens=16, messages=question, thinking={"type": "enabled", "budget_tokens": 1024}
        )
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    image: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}}
    with pytest.raises(anthropic.BadRequestError) as refused:  # a text-only model, behind a system prompt
        client.messages.create(
            model=MODEL, max_tokens=16, system="Be brief.", messages=[{"role": "user", "content": [image]}]
        )
    error: Any = refused.value.body
    assert error["error"]["message"].startswith("messages.0.content: "), error  # not the chat's messages[1]


# -- offline work: the Batch API on the same stack, with a second gateway and a restart


def batch_lines(prefix: str, n: int) -> bytes:
    lines = (
        {
            "custom_id": f"{prefix}{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"Count to {i + 3}."}],
                "max_tokens": 16,
            },
        }
        for i in range(n)
    )
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def until(condition: Callable[[], Any], what: str, timeout_s: float = 180.0) -> Any:
    """Poll ``condition`` (a state the stack reports) until it is truthy; its value."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def finished_batch(client: openai.OpenAI, batch_id: str) -> Any:
    batch = client.batches.retrieve(batch_id)
    return batch if batch.status in ("completed", "failed", "expired", "cancelled") else None


def metric(url: str, name: str, **labels: str) -> float:
    """A counter's value on a server's ``/metrics`` (summed over the label sets that match ``labels``)."""
    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def engine_url(stack: LocalStack) -> str:
    document = yaml.safe_load((stack.workdir / "default.yaml").read_text())
    return str(document["pools"]["small"]["replicas"][0]["base_url"])


def results_of(client: openai.OpenAI, batch: Any) -> list[dict[str, Any]]:
    assert batch.status == "completed" and batch.output_file_id
    return [json.loads(line) for line in client.files.content(batch.output_file_id).text.splitlines()]


RUNS_LINES = {"batches": {"concurrency": 8}}


def test_a_batch_runs_through_the_stack(stack: LocalStack, client: openai.OpenAI) -> None:
    uploaded = client.files.create(file=("batch.jsonl", io.BytesIO(batch_lines("q", 3))), purpose="batch")
    with extra_gateway(stack, RUNS_LINES):
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = until(lambda: finished_batch(client, batch.id), "the batch")
    results = results_of(client, done)
    assert [r["custom_id"] for r in results] == ["q0", "q1", "q2"]
    assert all(r["response"]["status_code"] == 200 for r in results)


def test_two_gateways_share_a_batch_and_a_restarted_one_resumes_it(
    stack: LocalStack, client: openai.OpenAI
) -> None:
    engine, n = engine_url(stack), 40
    before = answered(engine)
    uploaded = client.files.create(file=("shared.jsonl", io.BytesIO(batch_lines("s", n))), purpose="batch")
    with extra_gateway(stack, RUNS_LINES) as first, extra_gateway(stack, RUNS_LINES) as second:
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        until(lambda: recorded(first) and recorded(second), "a line recorded by each gateway")
    # both stopped (SIGTERM) with lines in flight, handed back; nothing runs lines until one starts
    counts = client.batches.retrieve(batch.id).request_counts
    assert counts is not None
    left = n - counts.completed - counts.failed
    with extra_gateway(stack, RUNS_LINES) as restarted:
        done = until(lambda: finished_batch(client, batch.id), "the batch")
        assert recorded(restarted) == left  # it resumed the batch: every line that was left, once
    results = results_of(client, done)
    assert done.request_counts is not None and (
        done.request_counts.completed,
        done.request_counts.failed,
    ) == (n, 0)
    assert sorted(r["custom_id"] for r in results) == sorted(f"s{i}" for i in range(n))  # each line once
    assert all(r["response"]["status_code"] == 200 for r in results)
    # the engine answered each line once, plus at most the lines the stopped gateways had in flight
    # (one may finish on the engine just as its gateway lets go of it)
    assert n <= answered(engine) - before <= n + 16


def recorded(gateway: LocalStack) -> float:
    return metric(gateway.base_url, "sortyard_batch_lines_total", outcome="recorded")


def answered(engine: str) -> float:
    return sum(
        metric(engine, "vllm:request_success_total", model_name="smollm2-135m", finished_reason=reason)
        for reason in ("stop", "length")
    )
