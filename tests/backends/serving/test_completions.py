"""``/v1/completions`` over the in-memory engine twin: prompts, streams, logprobs, ``max_tokens: 0``."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.backends.serving.fake_engine import MODEL, REPLY, FakeAsyncEngine
from tests.backends.serving.harness import assert_error, chat, post


def test_completions_plain_and_token_ids(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    result = client.completions.create(model=MODEL, prompt="Once", max_tokens=5)
    assert result.id.startswith("cmpl-")
    assert result.object == "text_completion"
    assert result.choices[0].text == REPLY[:5]
    assert result.choices[0].finish_reason == "length"
    assert fake.calls[-1]["prompt"] == list(b"Once")
    assert result.usage is not None and result.usage.prompt_tokens == 4
    client.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=2)
    assert fake.calls[-1]["prompt"] == [1, 2, 3]
    client.completions.create(model=MODEL, prompt=["Once"], max_tokens=2)
    assert fake.calls[-1]["prompt"] == list(b"Once")


def test_completions_default_max_tokens_is_16(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    client.completions.create(model=MODEL, prompt="Once")
    assert fake.calls[-1]["params"].max_tokens == 16


def test_completions_stream_with_logprobs(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt="Once",
        max_tokens=40,
        logprobs=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == REPLY
    tokens = [
        t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens or []
    ]
    assert len(tokens) == len(REPLY.encode())
    offsets = [
        o
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for o in c.choices[0].logprobs.text_offset or []
    ]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


def test_max_tokens_zero_completion_is_empty(base_url: str, fake: FakeAsyncEngine) -> None:
    num_calls = len(fake.calls)
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 0, "n": 2, "logprobs": 1}
    result = post(base_url, "/v1/completions", body).json()
    assert [(c["index"], c["text"], c["finish_reason"]) for c in result["choices"]] == [
        (0, "", "length"),
        (1, "", "length"),
    ]
    assert result["choices"][0]["logprobs"]["tokens"] == []
    assert result["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 0,
        "total_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{base_url}/v1/completions", json=stream, timeout=20) as response:
        assert response.status_code == 200
        events = b"".join(response.iter_bytes()).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    payloads = [json.loads(e[len(b"data: ") :]) for e in events[:-2]]
    assert [p["choices"][0]["finish_reason"] for p in payloads[:2]] == ["length", "length"]
    assert payloads[2]["choices"] == [] and payloads[2]["usage"]["completion_tokens"] == 0
    assert len(fake.calls) == num_calls  # the engine was never asked
    assert_error(
        post(base_url, "/v1/chat/completions", chat(max_tokens=0)), 400, "invalid_value", "max_tokens"
    )


@pytest.mark.parametrize("prompt", ["", None])
def test_no_prompt_starts_a_new_document(base_url: str, fake: FakeAsyncEngine, prompt: str | None) -> None:
    response = post(base_url, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert fake.calls[-1]["prompt"] == [256]  # the fake's EOS (it has no BOS): OpenAI's <|endoftext|>
