"""End to end: the official openai SDK -> a real gateway on loopback -> a fake upstream on loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Path:
    document = fake_policy(upstream.base_url, limits={"max_body_bytes": 4096})
    # the down replica is found out by the request sent to it (a 502), never by a probe that a slow
    # machine lets run first (then a 503: no healthy replica)
    document["routing"] = {"pools": {"down": {"health": {"probe_interval_s": 0}}}}
    return write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml", document)


@pytest.fixture(scope="module")
def gateway(policy_path: Path) -> Iterator[GatewayServer]:
    server = GatewayServer(policy_path).start()
    yield server
    server.stop()


@pytest.fixture
def client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)


@pytest.fixture
def aclient(gateway: GatewayServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)


# --- the happy paths --------------------------------------------------------------------------


def test_chat_reports_the_asked_model_and_forwards_unknown_fields(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    response = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,
        tools=tools,  # type: ignore[arg-type]
        extra_body={"logprobs": True, "vendor_knob": {"x": 1}},
    )
    assert response.model == "gpt-4o-mini"
    assert response.choices[0].message.content == "Hello from the fake upstream."
    assert response.usage is not None and response.usage.prompt_tokens == 11
    sent = upstream.requests[-1]
    assert sent["model"] == "echo"
    assert sent["tools"] == tools and sent["vendor_knob"] == {"x": 1} and sent["logprobs"] is True
    assert "stream_options" not in sent


def test_chat_response_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="small", messages=MESSAGES)
    assert raw.http_response.status_code == 200
    assert raw.headers["x-sortyard-pool"] == "small"
    assert raw.headers["x-request-id"]


def test_stream_relays_chunks_and_drops_the_usage_chunk_not_asked_for(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    chunks = list(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the fake upstream."
    assert all(c.model == "gpt-4o-mini" for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert upstream.requests[-1]["stream_options"] == {"include_usage": True}


def test_stream_keeps_the_usage_chunk_when_asked(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="small",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6


async def test_async_client_plain_and_stream(aclient: openai.AsyncOpenAI) -> None:
    response = await aclient.chat.completions.create(model="small", messages=MESSAGES)
    assert response.choices[0].message.content == "Hello from the fake upstream."
    stream = await aclient.chat.completions.create(model="small", messages=MESSAGES, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello from the fake upstream."
    models = await aclient.models.list()
    assert "small" in [m.id for m in models.data]


def test_completions_embeddings_and_models(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="small", prompt="Once")
    assert completion.choices[0].text == " done." and completion.model == "small"
    streamed = "".join(
        c.choices[0].text for c in client.completions.create(model="small", prompt="x", stream=True)
    )
    assert streamed == " done."
    embedding = client.embeddings.create(model="small", input=["a", "b"])
    assert len(embedding.data) == 2 and embedding.model == "small"
    ids = [m.id for m in client.models.list().data]
    assert {"small", "gpt-4o-mini", "fail"} <= set(ids)
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


# --- bad input ----------------------------------------------------------------------------------


def _post(gateway: GatewayServer, content: bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(
        gateway.url + path, content=content, headers={"Content-Type": "application/json"}, timeout=10
    )


def _assert_error_shape(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(
    ("content", "code", "param"),
    [
        (b"{not json", "invalid_json", None),
        (b"\xff\xfe{}", "invalid_json", None),
        (b'{"model": "small", "messages": "\xff"}', "invalid_json", None),
        (b"[1, 2]", "invalid_type", None),
        (b'{"model": "small"}', "missing_required_parameter", "messages"),
        (b'{"model": "small", "messages": []}', "invalid_value", "messages"),
        (b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}', "invalid_value", "model"),
        (
            b'{"model": "small", "messages": [{"content": "x"}]}',
            "missing_required_parameter",
            "messages[0].role",
        ),
        (
            b'{"model": "small", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            "invalid_value",
            "temperature",
        ),
        (b'{"model": "small", "messages": [{"role": "user", "content": "x"}], "n": 0}', "invalid_value", "n"),
    ],
)
def test_bad_bodies_get_400(gateway: GatewayServer, content: bytes, code: str, param: str | None) -> None:
    error = _assert_error_shape(_post(gateway, content), 400, code)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_sdk_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="small", messages=MESSAGES, temperature=7)
    assert info.value.code == "invalid_value"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert info.value.code == "model_not_found"
    assert "gpt-9" in info.value.message


def test_body_over_limit_is_413(gateway: GatewayServer) -> None:
    big = b'{"model": "small", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}'
    _assert_error_shape(_post(gateway, big), 413, "request_too_large")

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit still holds
        yield big

    response = httpx.post(gateway.url + "/v1/chat/completions", content=chunked(), timeout=10)
    _assert_error_shape(response, 413, "request_too_large")


def test_a_declared_length_over_the_limit_is_refused_before_the_body(gateway: GatewayServer) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        b"Content-Length: 60000000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        conn.sendall(head)  # and not one byte of the body: the answer must not wait for it
        reply = conn.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"request_too_large"' in reply


def test_unknown_route_and_method_are_openai_shaped(gateway: GatewayServer) -> None:
    _assert_error_shape(httpx.get(gateway.url + "/v1/nope"), 404)
    wrong = httpx.get(gateway.url + "/v1/chat/completions")
    _assert_error_shape(wrong, 405)
    assert wrong.headers["allow"] == "POST"  # RFC 9110: a 405 names the methods that work
    wrong = httpx.post(gateway.url + "/v1/models")
    _assert_error_shape(wrong, 405)
    assert "GET" in wrong.headers["allow"]


# --- upstream faults ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "exception", "status", "code"),
    [
        ("down", openai.APIStatusError, 502, "upstream_connect_error"),
        ("fail", openai.APIStatusError, 502, "upstream_error"),
        ("badjson", openai.APIStatusError, 502, "upstream_protocol_error"),
        ("hang", openai.APIStatusError, 504, "upstream_timeout"),
        ("reject", openai.BadRequestError, 400, "bad"),
    ],
)
def test_upstream_faults_are_typed_errors(
    client: openai.OpenAI, model: str, exception: type[Exception], status: int, code: str
) -> None:
    # the "hang" upstream never answers: its 504 can only come from the request's total_s deadline
    with pytest.raises(exception) as info:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert isinstance(info.value, openai.APIStatusError)
    assert info.value.status_code == status and info.value.code == code


@pytest.mark.parametrize("model", ["malformed", "cut"])
def test_mid_stream_failure_ends_with_an_error_event_then_done(gateway: GatewayServer, model: str) -> None:
    body = b'{"model": "%s", "stream": true, "messages": [{"role": "user", "content": "x"}]}' % model.encode()
    response = _post(gateway, body)
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert '"error"' in events[-2] and "upstream_protocol_error" in events[-2]


def test_sdk_raises_on_a_mid_stream_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="malformed", messages=MESSAGES, stream=True):
            pass


def test_stream_that_fails_before_the_first_byte_is_a_plain_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="fail", messages=MESSAGES, stream=True)
    assert info.value.status_code == 502


def test_client_disconnect_cancels_the_upstream_promptly(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    before = upstream.num_streams_cancelled
    body = b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", gateway.url + "/v1/chat/completions", content=body) as response,
    ):
        for _ in response.iter_bytes():
            break
    # the fake's stream runs 10 s and it counts a cancel only when a write fails: a count within the
    # first half of that is the upstream connection closed, not the stream ending on its own
    deadline = time.monotonic() + 5
    while upstream.num_streams_cancelled == before and time.monotonic() < deadline:
        time.sleep(0.005)
    assert upstream.num_streams_cancelled == before + 1
    gateway.settle()
    assert all(s.outstanding == 0 for s in gateway.gateway.balancer.all_replicas())


# --- health, readiness, metrics, reload ---------------------------------------------------------


def test_health_ready_and_metrics(gateway: GatewayServer, client: openai.OpenAI) -> None:
    client.chat.completions.create(model="small", messages=MESSAGES)
    gateway.settle()  # the request is counted by its finisher, after the response
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["policy"] is True
    scraped = httpx.get(gateway.url + "/metrics")
    assert scraped.headers.get_list("content-type") == [CONTENT_TYPE_LATEST]  # one charset, one header
    text = scraped.text
    assert "_created" not in text  # no twin series nobody asked for
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"sortyard_requests", "sortyard_request_duration_seconds"} <= names
    assert 'sortyard_requests_total{endpoint="chat",pool="small",status="200"}' in text


def test_invalid_policy_on_reload_keeps_the_last_good_one(
    gateway: GatewayServer, policy_path: Path, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    good = policy_path.read_text()
    reloader = gateway.gateway.reloader
    try:
        refused = reloader.num_refused
        policy_path.write_text(good.replace("http://127.0.0.1", "ftp://127.0.0.1", 1))
        deadline = time.monotonic() + 5
        while reloader.num_refused == refused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reloader.num_refused == refused + 1
        assert "expected an http(s) URL" in (reloader.last_error or "")
        assert client.chat.completions.create(model="small", messages=MESSAGES).model == "small"
        policy_path.write_text(good.replace("gpt-4o-mini: small", "gpt-4o-mini: small\n  brand-new: small"))
        deadline = time.monotonic() + 5
        while reloader.policy.pool_for_model("brand-new") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.chat.completions.create(model="brand-new", messages=MESSAGES).model == "brand-new"
    finally:
        policy_path.write_text(good)
        reloader.reload()
