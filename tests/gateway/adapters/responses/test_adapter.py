"""gateway/adapters/responses/adapter.py: ``ResponsesOverChat`` composed with a replica's adapter (OpenAI
mode, and a native kind), and a function-tool round trip through a real gateway with the official SDK
(the upstream a ``MemoryUpstreamClient`` that answers chat with a tool call)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest
from openai.types.responses import Response

from gateway.adapters import ResponsesOverChat, build_adapter
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from tools.servers.gateway_server import GatewayServer, write_policy

BASE = "http://engine.test/v1"
ROOT = "http://engine.test"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _chat(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "served",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }


def _tool_call_chunks() -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "served",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
        {"id": "c", "model": "served", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}},
    ]


def test_openai_mode_sends_the_chat_request_to_base_url() -> None:
    adapter = ResponsesOverChat(build_adapter("sortyard"), BASE + "/")
    exchange = adapter.exchange("/responses", {"model": "served", "input": "hi"}, ROOT, stream=False)
    assert exchange is not None and exchange.url == BASE + "/chat/completions"
    assert msgspec.json.decode(exchange.body) == {
        "model": "served",
        "messages": [{"role": "user", "content": "hi"}],
    }
    answer = msgspec.json.decode(exchange.translator.body(msgspec.json.encode(_chat({"content": "Hello"}))))
    response = Response.model_validate(answer)
    assert response.output_text == "Hello" and response.model == "served"
    assert exchange.translator.error(400, b'{"error": {}}') == b'{"error": {}}'


@pytest.mark.parametrize(
    ("chat_param", "param"),
    [
        ("max_tokens", "max_output_tokens"),
        ("response_format.json_schema.schema", "text.format"),
        ("messages", "input"),
        ("messages[1].content", "input"),
        ("tools[0].function.parameters", "tools[0].parameters"),
        ("temperature", "temperature"),
    ],
)
def test_a_chat_servers_error_names_the_field_the_client_sent(chat_param: str, param: str) -> None:
    adapter = ResponsesOverChat(build_adapter("sortyard"), BASE + "/")
    exchange = adapter.exchange("/responses", {"model": "served", "input": "hi"}, ROOT, stream=False)
    assert exchange is not None
    error = {"error": {"message": "bad", "type": "invalid_request_error", "param": chat_param, "code": None}}
    translated = msgspec.json.decode(exchange.translator.error(400, msgspec.json.encode(error)))
    assert translated == {"error": {**error["error"], "param": param}}


def test_other_paths_go_to_the_inner_adapter() -> None:
    adapter = ResponsesOverChat(build_adapter("tgi"), BASE)
    exchange = adapter.exchange("/completions", {"model": "m", "prompt": "x"}, ROOT, stream=False)
    assert exchange is not None and exchange.url == ROOT + "/generate_stream"
    assert (
        ResponsesOverChat(build_adapter("openai"), BASE).exchange("/chat/completions", {}, ROOT, stream=False)
        is None
    )


def test_a_native_kind_gets_its_own_chat_request_and_its_translation_is_chained() -> None:
    adapter = ResponsesOverChat(build_adapter("ollama"), BASE)
    body = {"model": "llama3", "input": "hi", "max_output_tokens": 5}
    exchange = adapter.exchange("/responses", body, ROOT, stream=True)
    assert exchange is not None and exchange.url == ROOT + "/api/chat"
    native = msgspec.json.decode(exchange.body)
    assert native["messages"] == [{"role": "user", "content": "hi"}] and native["options"]["num_predict"] == 5
    stream = exchange.translator.stream()
    lines = [
        {"model": "llama3", "message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"model": "llama3", "message": {"role": "assistant", "content": "lo"}, "done": False},
        {
            "model": "llama3",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 3,
            "eval_count": 2,
        },
    ]
    out = b"".join(stream.feed(json.dumps(line).encode() + b"\n") for line in lines) + stream.end()
    events = [json.loads(e.split(b"data: ", 1)[1]) for e in out.split(b"\n\n") if e]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello"
    assert events[-1]["response"]["usage"]["input_tokens"] == 3


# ---------------------------------------------------------------- a tool round trip, through a gateway


@pytest.fixture
def tool_stack(tmp_path: Path) -> Iterator[tuple[GatewayServer, MemoryUpstreamClient]]:
    def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        if not body:
            return Reply(200)  # health probes
        request = msgspec.json.decode(body)
        if request["messages"][-1]["role"] == "tool":
            return Reply.json(_chat({"role": "assistant", "content": "It is sunny in Paris."}))
        if request.get("stream"):
            return Reply.sse(*_tool_call_chunks())
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        return Reply.json(_chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"))

    client = MemoryUpstreamClient(handler)
    document = {
        "pools": {"small": {"replicas": [{"base_url": BASE, "model": "served", "kind": "sortyard"}]}},
        "auth": {"required": False},
        "store": {"url_env": None},
    }
    server = GatewayServer(write_policy(tmp_path / "policy.yaml", document), client=client).start()
    yield server, client
    server.stop()


def _sent(client: MemoryUpstreamClient) -> dict[str, Any]:
    body: dict[str, Any] = [r for r in client.requests if r.method == "POST"][-1].json()
    return body


def test_a_tool_call_comes_back_as_a_function_call_item_and_its_output_goes_up_as_a_tool_message(
    tool_stack: tuple[GatewayServer, MemoryUpstreamClient],
) -> None:
    server, upstream = tool_stack
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=10)
    first = client.responses.create(model="small", input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    assert _sent(upstream)["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in WEATHER.items() if k != "type"},
        }
    ]
    call = first.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id == "call_1"
    assert (
        json.loads(call.arguments) == {"city": "Paris"} and call.id is not None and call.id.startswith("fc_")
    )
    output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}
    tools: Any = [WEATHER]
    second = client.responses.create(
        model="small", previous_response_id=first.id, input=[output], tools=tools
    )
    assert second.output_text == "It is sunny in Paris."
    messages = _sent(upstream)["messages"]
    assert messages[1]["role"] == "assistant" and messages[1]["tool_calls"][0]["id"] == "call_1"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}


def test_a_streamed_tool_call_has_its_argument_events(
    tool_stack: tuple[GatewayServer, MemoryUpstreamClient],
) -> None:
    server, _ = tool_stack
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=10)
    with client.responses.stream(model="small", input="Weather?", tools=[WEATHER]) as stream:  # type: ignore[list-item]
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types.count("response.function_call_arguments.delta") == 2
    assert "response.function_call_arguments.done" in types and types[-1] == "response.completed"
    call = final.output[0]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
