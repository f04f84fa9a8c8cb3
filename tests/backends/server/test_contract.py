"""The HTTP contract of the engine server, over a real uvicorn with the in-memory engine twin."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.serving.app import create_app
from tests.backends.server.fake_engine import REPLY, FakeAsyncEngine
from tests.backends.server.harness import serve, wait_until

MODEL = "tiny-fake"


class FakeEmbedder:
    model_name = "all-minilm-l6-v2"

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        return [[1.0, 0.0, 0.0] for _ in texts], sum(len(t.split()) for t in texts)


@pytest.fixture(scope="module")
def fake() -> FakeAsyncEngine:
    return FakeAsyncEngine(max_waiting=1)


@pytest.fixture(scope="module")
def base_url(fake: FakeAsyncEngine) -> Iterator[str]:
    with serve(create_app(fake, embedder=FakeEmbedder())) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


def post(base_url: str, path: str, body: object, **kwargs: object) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(f"{base_url}{path}", content=content, headers=headers, timeout=20)


def assert_error(
    response: httpx.Response, status: int, code: str | None = None, param: str | None = None
) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["code"]  # every refusal names its reason
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param


# -------------------------------------------------------------------------------------------- models


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL, "all-minilm-l6-v2"]
    assert client.models.retrieve(MODEL).id == MODEL


# ---------------------------------------------------------------------------------------------- chat


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


# ---------------------------------------------------------------------------------------- completions


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


# ------------------------------------------------------------------------------------------ embeddings


def test_embeddings_with_fake_embedder(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="all-minilm-l6-v2", input=["a b", "c"])
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == [1.0, 0.0, 0.0]
    assert result.usage.prompt_tokens == 3
    as_base64 = client.embeddings.create(model="all-minilm-l6-v2", input="a", encoding_format="base64")
    raw = base64.b64decode(as_base64.data[0].embedding)  # type: ignore[arg-type]
    assert struct.unpack("<3f", raw) == (1.0, 0.0, 0.0)


# -------------------------------------------------------------------------------------------- errors


def test_invalid_json_is_400(base_url: str) -> None:
    assert_error(post(base_url, "/v1/chat/completions", b"{not json"), 400, "invalid_json")
    assert_error(post(base_url, "/v1/chat/completions", b""), 400, "invalid_json")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        for depth in (1_000, 100_000):  # msgspec's own limit is near 1,000: a 400, never a 500
            deep = b'{"model": "m", "x": ' + b"[" * depth + b"]" * depth + b"}"
            assert_error(post(base_url, path, deep), 400, "invalid_json")
    assert_error(post(base_url, "/v1/chat/completions", b"[1, 2]"), 400)


def chat(**fields: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, None),  # missing messages
        ({"model": MODEL, "messages": "hi"}, "messages"),
        ({"model": MODEL, "messages": [{"content": "hi"}]}, None),
        ({"model": MODEL, "messages": [{"role": 3, "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": []}, "messages"),
        (chat(temperature="hot"), "temperature"),
        (chat(temperature=-1), "temperature"),
        (chat(top_p=1.5), "top_p"),
        (chat(n=0), "n"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(top_logprobs=2), "top_logprobs"),
        (chat(logprobs=True, top_logprobs=99), "top_logprobs"),
        (chat(stop=[""]), "stop[0]"),
        (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
        ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content"),
        ({"model": MODEL, "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
    ],
)  # fmt: skip
def test_bad_chat_requests_are_400(base_url: str, body: dict[str, object], param: str | None) -> None:
    assert_error(post(base_url, "/v1/chat/completions", body), 400, param=param)


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        {"model": MODEL, "prompt": ["a", "b"]},
        {"model": MODEL, "prompt": [1, "b"]},
        {"model": MODEL, "prompt": [999]},
        {"model": MODEL, "prompt": "x", "echo": True},
        {"model": MODEL, "prompt": "x", "logprobs": "yes"},
    ],
)
def test_bad_completion_requests_are_400(base_url: str, body: dict[str, object]) -> None:
    assert_error(post(base_url, "/v1/completions", body), 400)


def test_top_p_zero_is_greedy(base_url: str, fake: FakeAsyncEngine) -> None:
    response = post(base_url, "/v1/chat/completions", chat(top_p=0, temperature=0.8))
    assert response.status_code == 200, response.text
    params = fake.calls[-1]["params"]
    assert (params.temperature, params.top_p, params.is_greedy) == (0.0, 1.0, True)


def test_nulls_mean_the_defaults(base_url: str, fake: FakeAsyncEngine) -> None:
    nulls = dict.fromkeys(["stream", "n", "temperature", "top_p", "max_tokens", "logprobs", "seed", "stop"])
    response = post(base_url, "/v1/chat/completions", chat(**nulls, top_logprobs=None, stream_options=None))
    assert response.status_code == 200, response.text
    params = fake.calls[-1]["params"]
    assert (params.n, params.temperature, params.top_p, params.max_tokens) == (1, 1.0, 1.0, None)
    response = post(base_url, "/v1/completions", {"model": MODEL, "prompt": "x", **nulls, "echo": None})
    assert response.status_code == 200, response.text
    assert fake.calls[-1]["params"].max_tokens == 16


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


def test_function_role_is_a_tool_result(base_url: str, fake: FakeAsyncEngine) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "function", "name": "f", "content": "42"}]
    response = post(base_url, "/v1/chat/completions", {"model": MODEL, "messages": messages})
    assert response.status_code == 200, response.text
    assert "<|im_start|>tool\n42" in bytes(fake.calls[-1]["prompt"]).decode()


def test_refusals_are_worded_as_openai_words_them(base_url: str) -> None:
    response = post(base_url, "/v1/chat/completions", chat(stream="yes"))
    assert response.json()["error"] == {
        "message": "Invalid value for 'stream': expected `bool | null`, got `str`.",
        "type": "invalid_request_error",
        "param": "stream",
        "code": "invalid_value",
    }
    error = post(base_url, "/v1/chat/completions", {"model": MODEL}).json()["error"]
    assert (error["param"], error["code"]) == ("messages", "missing_required_parameter")
    assert_error(post(base_url, "/v1/completions", {"model": MODEL, "prompt": "x", "echo": True}), 400,
                 "unsupported_value", "echo")  # fmt: skip
    assert_error(httpx.get(f"{base_url}/v1/nothing"), 404, "not_found")


def test_unknown_model_is_404(client: openai.OpenAI, base_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "Hi"}])
    assert info.value.code == "model_not_found"
    assert_error(post(base_url, "/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404, "model_not_found")
    assert_error(post(base_url, "/v1/embeddings", {"model": MODEL, "input": "x"}), 404, "model_not_found")
    assert_error(httpx.get(f"{base_url}/v1/models/gpt-9"), 404, "model_not_found")


def test_too_long_prompt_is_context_length_exceeded(client: openai.OpenAI, base_url: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 600}])
    assert info.value.code == "context_length_exceeded"
    body = {"model": MODEL, "prompt": "x" * 10, "max_tokens": 600}
    assert_error(post(base_url, "/v1/completions", body), 400, "context_length_exceeded", "max_tokens")


def test_unknown_route_and_method_are_openai_shaped(base_url: str) -> None:
    assert_error(httpx.get(f"{base_url}/v1/nothing"), 404)
    assert_error(httpx.get(f"{base_url}/v1/chat/completions"), 405)


def test_bad_embedding_requests_are_400(base_url: str) -> None:
    model = "all-minilm-l6-v2"
    for body in ({"model": model, "input": []}, {"model": model, "input": [1, 2]}, {"model": model},
                 {"model": model, "input": "x", "encoding_format": "int8"}):  # fmt: skip
        assert_error(post(base_url, "/v1/embeddings", body), 400)


# ------------------------------------------------------------------------------ queue and disconnects


def test_full_queue_is_429(client: openai.OpenAI, fake: FakeAsyncEngine) -> None:
    fake.hold()
    waiting = threading.Thread(
        target=lambda: client.completions.create(model=MODEL, prompt="a", max_tokens=2), daemon=True
    )
    waiting.start()
    try:
        assert wait_until(lambda: len(fake.waiting) == 1)
        with pytest.raises(openai.RateLimitError) as info:
            client.completions.create(model=MODEL, prompt="b", max_tokens=2)
        assert info.value.response.headers["retry-after"] == "1"
        assert info.value.code == "queue_full"
    finally:
        fake.release()
        waiting.join(timeout=10)
    assert not waiting.is_alive()


def test_stream_disconnect_aborts(base_url: str, fake: FakeAsyncEngine) -> None:
    fake.step_s = 0.05
    try:
        body = {"model": MODEL, "prompt": "a", "max_tokens": 200, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=20) as response:
            request_id = response.headers["x-request-id"]
            chunks = response.iter_bytes()  # held: a dropped iterator closes the response
            next(chunks)
            assert request_id in fake.running
        assert wait_until(lambda: request_id in fake.aborted and not fake.running)
        assert fake.stats().num_blocks_free == fake.num_blocks_total
    finally:
        fake.step_s = 0.001


def test_non_stream_disconnect_aborts(base_url: str, fake: FakeAsyncEngine) -> None:
    fake.step_s = 0.05
    try:
        before = len(fake.aborted)
        body = json.dumps({"model": MODEL, "prompt": "a", "max_tokens": 200, "ignore_eos": True}).encode()
        port = int(base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert wait_until(lambda: len(fake.running) == 1)
        assert wait_until(lambda: len(fake.aborted) == before + 1 and not fake.running)
    finally:
        fake.step_s = 0.001


# ------------------------------------------------------------------------------ health and metrics


def test_health_ready_metrics(base_url: str, client: openai.OpenAI) -> None:
    assert httpx.get(f"{base_url}/health").status_code == 200
    assert httpx.get(f"{base_url}/ready").json() == {"status": "ready"}
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    response = httpx.get(f"{base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:time_per_output_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_success": "counter",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
    samples = {s.name: s for f in families.values() for s in f.samples}
    assert samples["vllm:generation_tokens_total"].labels == {"model_name": MODEL}
    assert samples["vllm:generation_tokens_total"].value > 0
    assert samples["vllm:time_to_first_token_seconds_count"].value > 0
    assert samples["vllm:e2e_request_latency_seconds_count"].value > 0
    assert samples["vllm:time_per_output_token_seconds_count"].value > 0


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
