"""The Responses API served over chat, through a real gateway on loopback: the official SDK's
``client.responses`` -> the gateway -> the fake upstream's ``/v1/chat/completions`` (a replica of kind
``sortyard``). Plain and streamed answers, ``previous_response_id``, ``store: false``, the stored
responses' routes (``gateway/responses/routes.py``) and tenant scoping, over the memory store and a
real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
OTHER = new_key()
TEXT = "Hello from the fake upstream."
REDIS_ENV = "SORTYARD_TEST_RESPONSES_REDIS_URL"


@dataclass
class Stack:
    gateway: GatewayServer
    upstream: FakeUpstream

    def client(self, key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)

    def last_upstream(self) -> dict[str, Any]:
        body: dict[str, Any] = self.upstream.requests[-1]
        return body


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(params=["memory", "redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    document = fake_policy(upstream.base_url)
    document["pools"]["small"] = {
        "replicas": [{"base_url": upstream.base_url, "model": "echo", "kind": "sortyard"}]
    }
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "k"},
        {"sha256": hash_key(OTHER), "tenant": "globex", "name": "o"},
    ]
    if request.param == "redis":
        monkeypatch.setenv(REDIS_ENV, request.getfixturevalue("redis_flushed"))
        document["store"] = {"url_env": REDIS_ENV, "timeout_s": 2.0}
    server = GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()
    yield Stack(server, upstream)
    server.stop()


def test_a_plain_response_comes_from_chat_completions(stack: Stack) -> None:
    response = stack.client().responses.create(
        model="gpt-4o-mini", input="Say hello.", instructions="Be brief.", max_output_tokens=20
    )
    assert isinstance(response, Response)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed" and response.model == "gpt-4o-mini"
    assert response.output_text == TEXT
    assert response.usage is not None and response.usage.total_tokens > 0
    sent = stack.last_upstream()
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert sent["max_tokens"] == 20 and "input" not in sent and "store" not in sent


def test_a_stream_is_the_responses_event_sequence(stack: Stack) -> None:
    with stack.client().responses.create(model="small", input="Say hello.", stream=True) as events:
        seen = list(events)
    types = [event.type for event in seen]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in seen] == list(range(len(seen)))
    text = "".join(event.delta for event in seen if event.type == "response.output_text.delta")
    assert text == TEXT
    completed = seen[-1]
    assert completed.type == "response.completed" and completed.response.usage is not None
    assert completed.response.model == "small"
    assert stack.last_upstream()["stream_options"] == {"include_usage": True}


def test_the_sdks_stream_helper_gives_the_final_response(stack: Stack) -> None:
    with stack.client().responses.stream(model="small", input="Say hello.") as stream:
        final = stream.get_final_response()
    assert final.output_text == TEXT and final.status == "completed"
    stored = stack.client().responses.retrieve(final.id)
    assert stored.output_text == TEXT


def test_previous_response_id_sends_the_whole_conversation(stack: Stack) -> None:
    client = stack.client()
    first = client.responses.create(model="small", input="My name is Ada.")
    second = client.responses.create(model="small", input="What is my name?", previous_response_id=first.id)
    assert stack.last_upstream()["messages"] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": TEXT},
        {"role": "user", "content": "What is my name?"},
    ]
    third = client.responses.create(model="small", input="And again?", previous_response_id=second.id)
    assert len(stack.last_upstream()["messages"]) == 5
    items = client.responses.input_items.list(third.id, order="asc")
    assert [item.type for item in items.data] == ["message"] * 5
    assert stack.client().responses.retrieve(second.id).previous_response_id == first.id


def test_stored_responses_can_be_listed_retrieved_and_deleted(stack: Stack) -> None:
    client = stack.client()
    first = client.responses.create(model="small", input="One.")
    second = client.responses.create(model="small", input="Two.", previous_response_id=first.id)
    assert client.responses.retrieve(first.id).output_text == TEXT
    page: Any = client.get(
        f"/responses/{second.id}/input_items", cast_to=object, options={"params": {"limit": 2}}
    )
    assert len(page["data"]) == 2 and page["has_more"] and page["first_id"] == page["data"][0]["id"]
    assert page["data"][0]["content"][0]["text"] == "Two."  # desc: newest first
    rest = client.responses.input_items.list(second.id, limit=2, after=page["last_id"])
    assert len(rest.data) == 1 and not rest.has_more and rest.data[0].type == "message"
    deleted = client.delete(f"/responses/{first.id}", cast_to=object)
    assert deleted == {"id": first.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)


def test_store_false_is_not_kept(stack: Stack) -> None:
    response = stack.client().responses.create(model="small", input="Hi.", store=False)
    with pytest.raises(openai.NotFoundError):
        stack.client().responses.retrieve(response.id)


def test_another_tenants_response_is_not_found(stack: Stack) -> None:
    response = stack.client().responses.create(model="small", input="Secret.")
    other = stack.client(OTHER)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.input_items.list(response.id)
    with pytest.raises(openai.NotFoundError) as caught:
        other.responses.create(model="small", input="Go on.", previous_response_id=response.id)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "previous_response_id"
    assert stack.client().responses.retrieve(response.id).id == response.id  # still the owner's


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"background": True}, "background"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format"),
    ],
)
def test_what_a_chat_server_cannot_honour_is_a_400_naming_it(
    stack: Stack, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client().responses.create(model="small", input="Hi.", extra_body=fields)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param


def test_routes_need_a_key_and_answer_openai_errors(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError):
        stack.client("sk-wrong").responses.retrieve("resp_x")
    with pytest.raises(openai.BadRequestError) as caught:
        response = stack.client().responses.create(model="small", input="Hi.")
        stack.client().responses.input_items.list(response.id, extra_query={"limit": 0})
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "limit"
