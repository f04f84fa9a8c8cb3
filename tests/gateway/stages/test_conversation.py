"""gateway/stages/conversation.py: ``previous_response_id`` expanded before routing and counting, the
answer stored, and what each replica kind is sent (a native one ``store: false`` and no
``previous_response_id``; a chat-only one the chat request). Through ``Pipeline`` with an in-memory
upstream; the stage runs for Responses calls only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from gateway.cache.blobs import MemoryBlobs
from gateway.errors import InvalidRequest, NotFound
from gateway.pipeline import Endpoint, Pipeline
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.responses import ResponseStore
from gateway.stages.conversation import ContinueConversation
from tests.support.calls import (
    build_call,
    chat_completion,
    compile_doc,
    policy_doc,
    read_result,
    upstream_stage,
)

NATIVE_ANSWER = {
    "id": "resp_native",
    "object": "response",
    "created_at": 1,
    "model": "served-small",
    "status": "completed",
    "output": [
        {
            "id": "msg_n",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi"}],
        }
    ],
    "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
}


def _handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
    if url.endswith("/responses"):
        return Reply.json(NATIVE_ANSWER)
    return Reply.json(chat_completion("served-small", "Hello."))


class Rig:
    def __init__(self, **replica: Any) -> None:
        document = policy_doc()
        document["pools"]["small"]["replicas"][0].update(replica)
        self.compiled = compile_doc(document)
        self.client = MemoryUpstreamClient(_handler)
        self.store = ResponseStore(MemoryBlobs(1024 * 1024))
        self.pipeline = Pipeline(
            [ContinueConversation(self.store), upstream_stage(self.compiled, self.client)]
        )

    async def ask(self, endpoint: Endpoint = Endpoint.RESPONSES, **body: Any) -> dict[str, Any]:
        call = build_call(self.compiled, {"model": "small", **body}, endpoint=endpoint)
        result = await self.pipeline.run(call)
        answer: dict[str, Any] = msgspec.json.decode(await read_result(result))
        await call.finish()
        return answer

    def sent(self) -> tuple[str, dict[str, Any]]:
        request = self.client.requests[-1]
        return request.url, request.json()


async def test_a_chat_only_replica_gets_the_chat_request_and_the_turn_is_stored() -> None:
    rig = Rig(kind="sortyard")
    first = await rig.ask(input="My name is Ada.")
    url, sent = rig.sent()
    assert (
        url == "http://small-0.test/v1/chat/completions"
        and sent["messages"][-1]["content"] == "My name is Ada."
    )
    stored = await rig.store.get("anonymous", first["id"])
    assert stored is not None and stored.response["output"][0]["content"][0]["text"] == "Hello."
    second = await rig.ask(input="And me?", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"] and second["store"] is True
    _, sent = rig.sent()
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert "previous_response_id" not in sent


async def test_a_native_replica_is_sent_store_false_and_the_expanded_input() -> None:
    rig = Rig(kind="vllm")
    first = await rig.ask(input="Hi")
    url, sent = rig.sent()
    assert url == "http://small-0.test/v1/responses" and sent["store"] is False and sent["input"] == "Hi"
    assert first["id"] == "resp_native"
    await rig.ask(input="Again", previous_response_id="resp_native")
    _, sent = rig.sent()
    assert "previous_response_id" not in sent and sent["store"] is False
    assert [item.get("role") for item in sent["input"]] == ["user", "assistant", "user"]
    assert sent["input"][0]["content"] == [{"type": "input_text", "text": "Hi"}]


async def test_responses_native_on_a_chat_kind_and_chat_on_a_native_kind() -> None:
    rig = Rig(kind="openai", responses="chat")
    await rig.ask(input="Hi")
    assert rig.sent()[0].endswith("/chat/completions")
    rig = Rig(kind="llamacpp", responses="native")
    await rig.ask(input="Hi")
    assert rig.sent()[0].endswith("/v1/responses")


async def test_store_false_keeps_nothing() -> None:
    rig = Rig(kind="sortyard")
    answer = await rig.ask(input="Hi", store=False)
    assert await rig.store.get("anonymous", answer["id"]) is None


async def test_an_unknown_previous_response_is_404_naming_the_field() -> None:
    rig = Rig(kind="sortyard")
    with pytest.raises(NotFound) as caught:
        await rig.ask(input="Hi", previous_response_id="resp_nope")
    assert caught.value.param == "previous_response_id"
    with pytest.raises(InvalidRequest):
        await rig.ask(input="Hi", previous_response_id=7)
    assert rig.client.requests == []


async def test_other_endpoints_never_meet_the_stage() -> None:
    rig = Rig(kind="sortyard")
    assert rig.pipeline._walks[Endpoint.CHAT] == rig.pipeline.stages[1:]
    assert rig.pipeline._walks[Endpoint.RESPONSES] == rig.pipeline.stages
    await rig.ask(Endpoint.CHAT, messages=[{"role": "user", "content": "hi"}], previous_response_id="resp_x")
    assert rig.sent()[1]["previous_response_id"] == "resp_x"  # chat passes unknown fields through
