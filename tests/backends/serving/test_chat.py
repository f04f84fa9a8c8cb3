"""``/v1/chat/completions`` over the in-memory engine twin: plain, streamed, n, stops, logprobs."""

from __future__ import annotations

import json

import httpx
import openai

from tests.backends.serving.fake_engine import MODEL, REPLY, FakeAsyncEngine
from tests.backends.serving.harness import post


def test_chat_plain(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    result = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert result.id.startswith("chatcmpl-")
    assert result.object == "chat.completion"
    assert result.model == MODEL
    [choice] = result.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == REPLY
    assert choice.finish_reason == "stop"
    assert choice.index == 0
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert fake.calls[-1]["prompt"] == list(prompt.encode())
    assert result.usage is not None
    assert result.usage.prompt_tokens == len(prompt.encode())
    assert result.usage.completion_tokens == len(REPLY.encode())
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens
    assert result.usage.prompt_tokens_details is not None
    assert result.usage.prompt_tokens_details.cached_tokens == 3


def test_chat_stream_deltas_and_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(content) == REPLY
    assert not any("\ufffd" in piece for piece in content)  # no split UTF-8 character
    content_chunks = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in content_chunks][-1] == "stop"
    assert all(c.choices[0].finish_reason is None for c in content_chunks[:-1])
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(REPLY.encode())


def test_chat_stream_wire_format(base_url: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True, "max_tokens": 3}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=20) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(response.iter_bytes())
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    assert events[-2] == b"data: [DONE]"
    payloads = [json.loads(e[len(b"data: ") :]) for e in events[:-2]]
    assert "usage" not in payloads[-1]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": "H"}
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


def test_chat_n_choices(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2)
    assert [c.index for c in result.choices] == [0, 1]
    assert all(c.message.content == REPLY for c in result.choices)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2, stream=True
    )
    texts = ["", ""]
    roles = [0, 0]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            roles[choice.index] += choice.delta.role == "assistant"
    assert texts == [REPLY, REPLY]
    assert roles == [1, 1]


def test_chat_stop_string_never_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], stop=["wörld"], stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello, "
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_sampling_fields_reach_the_engine(base_url: str, fake: FakeAsyncEngine) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "developer", "content": "Be brief"}, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 5,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
        "stop": "zz",
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "top_k": 5,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "stop_token_ids": [3],
        "ignore_eos": True,
        "priority": 2,
        "cache_salt": "tenant-a",
        "some_future_field": {"x": 1},
        "tools": [],
    }
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = post(base_url, "/v1/chat/completions", body, headers={"traceparent": traceparent})
    assert response.status_code == 200, response.text
    assert response.headers["traceparent"] == traceparent
    call = fake.calls[-1]
    params = call["params"]
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (5, 0.5, 0.9, 7)
    assert (params.stop, params.presence_penalty, params.frequency_penalty) == (["zz"], 0.1, 0.2)
    assert (params.top_k, params.min_p, params.repetition_penalty) == (5, 0.05, 1.1)
    assert (params.stop_token_ids, params.ignore_eos, params.logprobs) == (
        [3, 255],
        True,
        None,
    )  # 255: the end-of-turn token, added to every chat request
    assert (call["cache_salt"], call["priority"]) == ("tenant-a", 2)
    assert bytes(call["prompt"]).decode().startswith("<|im_start|>system\nBe brief")


def test_chat_logprobs(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], logprobs=True, top_logprobs=2, max_tokens=2
    )
    logprobs = result.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [t.token for t in logprobs.content] == ["H", "e"]
    assert logprobs.content[0].logprob == -0.5
    assert logprobs.content[0].bytes == [72]
    assert [t.token for t in logprobs.content[0].top_logprobs] == ["A", "B"]
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], logprobs=True, max_tokens=3, stream=True
    )
    tokens = [t.token for c in stream for t in (c.choices[0].logprobs.content or [])]  # type: ignore[union-attr]
    assert tokens == ["H", "e", "l"]


def test_function_role_is_a_tool_result(base_url: str, fake: FakeAsyncEngine) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "function", "name": "f", "content": "42"}]
    response = post(base_url, "/v1/chat/completions", {"model": MODEL, "messages": messages})
    assert response.status_code == 200, response.text
    assert "<|im_start|>tool\n42" in bytes(fake.calls[-1]["prompt"]).decode()


def test_chat_requests_stop_at_the_end_of_turn_token_completions_do_not(
    client: openai.OpenAI, fake: FakeAsyncEngine
) -> None:
    client.chat.completions.create(
        model="tiny-fake",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        extra_body={"stop_token_ids": [7]},
    )
    assert fake.calls[-1]["params"].stop_token_ids == [7, 255]
    client.completions.create(model="tiny-fake", prompt="Once", max_tokens=2)
    assert fake.calls[-1]["params"].stop_token_ids == []
