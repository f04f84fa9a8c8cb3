"""``/v1/messages`` and ``/v1/messages/count_tokens`` through a real gateway on loopback, with the official
``anthropic`` SDK as the client and the fake OpenAI upstream behind: the chat request it means goes
upstream, the answer comes back as a message or Anthropic's event stream, keys come in ``x-api-key``,
every bad body is Anthropic's 400, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.keys.hashing import hash_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = "sk-test-anthropic-0123456789"
MODEL = "claude-sonnet-4-5"
TEXT = "Hello from the fake upstream."
MAX_BODY_BYTES = 64 * 1024
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    document = fake_policy(
        upstream.base_url,
        aliases={MODEL: "small", "claude-broken": "fail"},
        auth={"required": True},
        keys=[{"sha256": hash_key(KEY), "tenant": "t1", "name": "t1"}],
        # "auto": the shipped classifier, every tier on small, whose template overhead is its own
        classifier={"kind": "learned", "tier_pools": {"small": "small", "medium": "small", "large": "small"}},
        limits={"max_body_bytes": MAX_BODY_BYTES},
    )
    document["pools"]["small"]["template_tokens"] = {"per_message": 40, "per_request": 400}
    path = write_policy(tmp_path_factory.mktemp("messages") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


@pytest.fixture
def client(gateway: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=10)


def test_a_message(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=32,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hi"}],
        stop_sequences=["END"],
    )
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == TEXT  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    sent = upstream.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert sent["stop"] == ["END"] and sent["max_tokens"] == 32


def test_a_stream(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == TEXT
    assert final.content[0].text == TEXT  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0


def test_a_tool_result_goes_upstream_as_a_tool_message(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    client.messages.create(
        model=MODEL,
        max_tokens=16,
        tools=[{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "22C"}],
            },
        ],
    )
    sent = upstream.requests[-1]
    assert sent["messages"][1]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "22C"}
    assert sent["tools"][0]["function"]["name"] == "get_weather"


def test_count_tokens(client: anthropic.Anthropic) -> None:
    short = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    long = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Hi " * 50}], system="Be brief."
    )
    assert 0 < short.input_tokens < long.input_tokens
    # a tool named as MCP servers name them, and a schema that leaves its type out (an object), count
    tool: Any = {"name": "search.web", "input_schema": {"properties": {"q": {"type": "string"}}}}
    with_tool = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], tools=[tool]
    )
    assert with_tool.input_tokens > short.input_tokens


def test_count_tokens_routes_auto_as_the_message_does(client: anthropic.Anthropic) -> None:
    """``auto`` is classified by the route stage (to small here); the count has small's overhead."""
    messages: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]
    auto = client.messages.count_tokens(model="auto", messages=messages)
    pool = client.messages.count_tokens(model="small", messages=messages)
    assert auto.input_tokens == pool.input_tokens > 400  # the pool's per_request tokens included
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.count_tokens(model="no-such-model", messages=messages)
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_count_tokens_errors_carry_the_request_id_and_the_body_is_bounded(gateway: GatewayServer) -> None:
    url = gateway.url + "/v1/messages/count_tokens"
    unauthenticated = httpx.post(url, json={}, headers={**HEADERS, "x-api-key": "sk-wrong"})
    big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * MAX_BODY_BYTES}]})
    declared = httpx.post(url, content=big, headers=HEADERS)

    def chunked() -> Iterator[bytes]:  # no Content-Length: the bound still holds
        yield big.encode()

    streamed = httpx.post(url, content=chunked(), headers=HEADERS)
    for answer, status, kind in [
        (unauthenticated, 401, "authentication_error"),
        (declared, 413, "request_too_large"),
        (streamed, 413, "request_too_large"),
    ]:
        document = answer.json()
        assert answer.status_code == status and document["error"]["type"] == kind, answer.text
        assert document["request_id"] == answer.headers["x-request-id"]


BAD_TOOLS = [
    {"name": "get weather", "input_schema": {"type": "object"}},
    {"name": "x" * 65, "input_schema": {"type": "object"}},
    {"name": "get_weather", "input_schema": {"type": "string"}},
]


@pytest.mark.parametrize("tool", BAD_TOOLS)
def test_a_bad_tool_is_the_same_400_on_both_routes(client: anthropic.Anthropic, tool: dict[str, Any]) -> None:
    """The tool rules are checked at the edge: the same 400 whatever the pool, with no server to ask."""
    messages: list[Any] = [{"role": "user", "content": "Hi"}]
    tools: list[Any] = [tool]
    with pytest.raises(anthropic.BadRequestError) as sent:
        client.messages.create(model=MODEL, max_tokens=8, messages=messages, tools=tools)
    with pytest.raises(anthropic.BadRequestError) as counted:
        client.messages.count_tokens(model=MODEL, messages=messages, tools=tools)
    sent_body: Any = sent.value.body
    counted_body: Any = counted.value.body
    assert sent_body["error"]["message"].startswith("tools.0.")
    assert counted_body["error"]["message"] == sent_body["error"]["message"]


def test_errors_in_anthropics_shape(client: anthropic.Anthropic, gateway: GatewayServer) -> None:
    with pytest.raises(anthropic.AuthenticationError) as unauthenticated:
        anthropic.Anthropic(base_url=gateway.url, api_key="sk-wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    assert unauthenticated.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(
            model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(
            model="claude-broken", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    assert failed.value.body["type"] == "error"  # type: ignore[index]


BAD_BODIES = [
    b"",
    b"{not json",
    b"[1, 2]",
    b'{"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": "Hi"}',
    b'{"model": "claude-sonnet-4-5", "max_tokens": 8, '
    b'"messages": [{"role": "user", "content": [{"type": "x"}]}]}',
    b'{"model": 5, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}',
    b'{"model": "claude-sonnet-4-5", "max_tokens": "8", "messages": [{"role": "user", "content": "Hi"}]}',
    b'{"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], '
    b'"thinking": {"type": "enabled", "budget_tokens": 2000}}',
]
BAD_BODIES.append(
    b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "metadata": '
    + b"[" * 5000
    + b"]" * 5000
    + b"}"
)
NO_MAX_TOKENS = b'{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hi"}]}'


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/messages", NO_MAX_TOKENS)]
    + [(path, body) for path in ("/v1/messages", "/v1/messages/count_tokens") for body in BAD_BODIES],
)
def test_every_bad_body_is_a_400_in_anthropics_shape(gateway: GatewayServer, path: str, body: bytes) -> None:
    answer = httpx.post(gateway.url + path, content=body, headers=HEADERS)
    assert answer.status_code == 400, answer.text
    document: dict[str, Any] = answer.json()
    assert document["type"] == "error" and document["error"]["type"] == "invalid_request_error"
    assert document["request_id"] == answer.headers["x-request-id"]


def test_the_pipeline_routes_it_like_a_chat_request(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-sortyard-pool"] == "small" and raw.headers["x-request-id"]


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/messages/batches"), ("GET", "/v1/messages")])
def test_an_unknown_route_or_method_under_messages_answers_in_anthropics_shape(
    gateway: GatewayServer, method: str, path: str
) -> None:
    """The Message Batches API is not served: an Anthropic client hears so in its own shape."""
    answer = httpx.request(method, gateway.url + path, headers=HEADERS, content=b"{}")
    assert answer.status_code in (404, 405)
    document: dict[str, Any] = answer.json()
    assert document["type"] == "error" and document["error"]["type"] in (
        "not_found_error",
        "invalid_request_error",
    )
