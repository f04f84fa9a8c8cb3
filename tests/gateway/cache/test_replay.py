"""SSE replay of cached responses (checked chunk by chunk, and parsed by the openai SDK), and the
accumulator that turns a relayed stream back into a complete response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp import web

from gateway.cache import Entry, EntryKind, StreamAccumulator, replay_sse
from tests.gateway.cache.samples import CHAT, TEXT, TOOLS, TWO_CHOICES, USAGE, encode


def events(stream: bytes) -> list[Any]:
    """Every ``data:`` payload of an SSE stream, JSON-decoded (``[DONE]`` as the string)."""
    assert stream.endswith(b"data: [DONE]\n\n")
    out: list[Any] = []
    for event in stream.split(b"\n\n")[:-1]:
        assert event.startswith(b"data: ")
        payload = event[len(b"data: ") :]
        out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def test_chat_replay_has_openais_chunk_shape() -> None:
    chunks = events(replay_sse(Entry(EntryKind.CHAT, encode(CHAT)), include_usage=False))
    assert chunks[-1] == "[DONE]"
    head = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": "small",
        "system_fingerprint": "fp_1",
    }
    content = CHAT["choices"][0]["message"]["content"]
    assert chunks[:-1] == [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        },
        {
            **head,
            "choices": [{"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}],
        },
        {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]},
    ]


def test_usage_chunk_only_when_asked() -> None:
    entry = Entry(EntryKind.CHAT, encode(CHAT))
    without = events(replay_sse(entry, include_usage=False))
    assert all("usage" not in c for c in without[:-1])
    with_usage = events(replay_sse(entry, include_usage=True))
    assert with_usage[-2]["choices"] == [] and with_usage[-2]["usage"] == USAGE
    assert all(c["usage"] is None for c in with_usage[:-2])  # as OpenAI's streams do


def test_long_content_can_be_split_into_deltas() -> None:
    chunks = events(replay_sse(Entry(EntryKind.CHAT, encode(CHAT)), include_usage=False, chunk_chars=10))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert text == CHAT["choices"][0]["message"]["content"]
    assert len(chunks) > 5


def test_text_completion_replay() -> None:
    chunks = events(replay_sse(Entry(EntryKind.COMPLETION, encode(TEXT)), include_usage=True))
    assert [c["object"] for c in chunks[:-1]] == ["text_completion"] * 3
    assert chunks[0]["choices"] == [
        {"text": " Paris, of course.", "index": 0, "logprobs": None, "finish_reason": None}
    ]
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[2]["usage"] == USAGE


@pytest.mark.parametrize("sample", [CHAT, TOOLS, TWO_CHOICES, TEXT], ids=["chat", "tools", "n2", "text"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_accumulating_a_replay_gives_back_the_response(sample: dict[str, Any], include_usage: bool) -> None:
    kind = EntryKind.COMPLETION if sample["object"] == "text_completion" else EntryKind.CHAT
    stream = replay_sse(Entry(kind, encode(sample)), include_usage=include_usage, chunk_chars=7)
    accumulator = StreamAccumulator()
    for i in range(0, len(stream), 13):  # arbitrary network reads
        accumulator.feed(stream[i : i + 13])
    rebuilt = accumulator.entry(usage=None if include_usage else USAGE)
    assert rebuilt is not None and rebuilt.kind == kind
    assert json.loads(rebuilt.body) == sample


def test_a_stream_that_did_not_finish_is_not_stored() -> None:
    stream = replay_sse(Entry(EntryKind.CHAT, encode(CHAT)), include_usage=True)
    cut = StreamAccumulator()
    cut.feed(stream[: stream.rindex(b"data: [DONE]")])
    assert cut.entry() is None
    errored = StreamAccumulator()
    errored.feed(stream.split(b"\n\n")[0] + b"\n\n")
    errored.feed(b'data: {"error": {"message": "boom", "type": "server_error"}}\n\ndata: [DONE]\n\n')
    assert errored.entry() is None
    garbage = StreamAccumulator()
    garbage.feed(b"data: {not json\n\ndata: [DONE]\n\n")
    assert garbage.entry() is None


def test_keep_alive_comments_are_ignored() -> None:
    stream = replay_sse(Entry(EntryKind.CHAT, encode(CHAT)), include_usage=True)
    accumulator = StreamAccumulator()
    accumulator.feed(b": keep-alive\n\n" + stream)
    entry = accumulator.entry()
    assert entry is not None and json.loads(entry.body) == CHAT


# ---- the openai SDK reads a replay as it reads a live stream ------------------------------------


@pytest.fixture
async def replay_server() -> AsyncIterator[tuple[str, dict[str, bytes]]]:
    """A loopback server answering /v1/chat/completions and /v1/completions with canned SSE bytes."""
    streams: dict[str, bytes] = {}

    async def serve(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(streams[request.path])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", serve)
    app.router.add_post("/v1/completions", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1", streams
    await runner.cleanup()


async def test_openai_sdk_parses_a_chat_replay(replay_server: tuple[str, dict[str, bytes]]) -> None:
    base_url, streams = replay_server
    streams["/v1/chat/completions"] = replay_sse(
        Entry(EntryKind.CHAT, encode(TOOLS)), include_usage=True, chunk_chars=5
    )
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": "weather?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish, usage, ids = None, None, set()
    async for chunk in stream:
        ids.add(chunk.id)
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or ():
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                if call.function and call.function.arguments:
                    arguments[call.index] = arguments.get(call.index, "") + call.function.arguments
    await client.close()
    assert ids == {"chatcmpl-tools"}
    assert names == {0: "get_weather", 1: "get_time"}
    assert arguments == {0: '{"city": "Paris"}', 1: "{}"}
    assert finish == "tool_calls"
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (12, 7)


async def test_openai_sdk_parses_a_text_replay(replay_server: tuple[str, dict[str, bytes]]) -> None:
    base_url, streams = replay_server
    streams["/v1/completions"] = replay_sse(Entry(EntryKind.COMPLETION, encode(TEXT)), include_usage=False)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    stream = await client.completions.create(model="small", prompt="The capital of France is", stream=True)
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    await client.close()
    assert text == " Paris, of course."


async def test_openai_sdk_reads_content_of_a_chat_replay(replay_server: tuple[str, dict[str, bytes]]) -> None:
    base_url, streams = replay_server
    streams["/v1/chat/completions"] = replay_sse(Entry(EntryKind.CHAT, encode(CHAT)), include_usage=False)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "capital?"}], stream=True
    )
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    await client.close()
    assert "".join(parts) == CHAT["choices"][0]["message"]["content"]
