"""gateway/responses/turn.py: a request's input items, and its answer stored as it goes out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from gateway.cache.blobs import MemoryBlobs
from gateway.pipeline import BytesResult, Endpoint, StreamResult
from gateway.responses import ResponseStore, Turn, input_items
from tests.support.calls import build_call, policy_doc

RESPONSE = {"id": "resp_1", "object": "response", "output": [], "status": "completed"}


def test_input_items_get_ids_and_typed_content() -> None:
    items = input_items("Hi")
    assert items[0]["type"] == "message" and items[0]["role"] == "user" and items[0]["id"].startswith("msg_")
    assert items[0]["content"] == [{"type": "input_text", "text": "Hi"}]
    given: list[Any] = [
        {"role": "assistant", "content": "Yo"},
        {"type": "function_call_output", "call_id": "c", "output": "x", "id": "fco_mine"},
        "junk",
    ]
    assert [(i["type"], i["id"][:4]) for i in input_items(given)] == [
        ("message", "msg_"),
        ("function_call_output", "fco_"),
    ]
    assert input_items(given)[0]["content"] == [{"type": "output_text", "text": "Yo"}]
    assert input_items(None) == []


def _call() -> Any:
    return build_call(policy_doc(), {"model": "small", "input": "Hi"}, endpoint=Endpoint.RESPONSES)


async def test_a_plain_answer_is_stored_before_it_goes_out() -> None:
    store = ResponseStore(MemoryBlobs(1024 * 1024))
    turn = Turn(store, input_items("Hi"), "resp_0")
    result = await turn.watch(_call(), BytesResult(200, msgspec.json.encode(RESPONSE)))
    assert isinstance(result, BytesResult)
    stored = await store.get("anonymous", "resp_1")
    assert stored is not None and stored.response["previous_response_id"] == "resp_0"
    assert stored.input_items[0]["content"][0]["text"] == "Hi"
    await turn.watch(_call(), BytesResult(400, b'{"error": {}}'))  # an error stores nothing


async def test_a_stream_is_stored_at_its_final_event() -> None:
    store = ResponseStore(MemoryBlobs(1024 * 1024))
    turn = Turn(store, [], None)
    final = {"type": "response.completed", "sequence_number": 3, "response": RESPONSE}
    chunks = [
        b"event: response.created\ndata: {}\n\n",
        b"event: response.completed\ndata: " + msgspec.json.encode(final) + b"\n\n",
    ]

    async def events() -> AsyncIterator[bytes]:
        for chunk in chunks:
            assert await store.get("anonymous", "resp_1") is None  # not before the final event
            yield chunk

    result = await turn.watch(_call(), StreamResult(events()))
    assert isinstance(result, StreamResult)
    seen = [chunk async for chunk in result.events]
    assert seen == chunks and await store.get("anonymous", "resp_1") is not None


async def test_a_stream_without_a_final_event_stores_nothing() -> None:
    store = ResponseStore(MemoryBlobs(1024 * 1024))

    async def events() -> AsyncIterator[bytes]:
        yield b'event: error\ndata: {"type": "error"}\n\n'

    result = await Turn(store, [], None).watch(_call(), StreamResult(events()))
    assert isinstance(result, StreamResult)
    assert [c async for c in result.events] and store.blobs.num_bytes == 0  # type: ignore[attr-defined]
