"""One engine request as the server drives it: a full queue is a 429, a prompt the KV cache cannot hold
is context_length_exceeded, a client that hangs up aborts its request (streamed or not), a stopped engine
(the server shutting down) is a 503 model_not_ready."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import openai
import pytest

from backends.serving.app import create_app
from tests.backends.serving.fake_engine import MODEL, FakeAsyncEngine
from tests.backends.serving.harness import assert_error, post, serve, wait_until


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


def test_a_prompt_bigger_than_the_kv_cache_is_context_length_exceeded(
    client: openai.OpenAI, fake: FakeAsyncEngine
) -> None:
    """Shorter than the model's context but past what the whole cache holds: the OpenAI code for a
    prompt too long, not a bare invalid_value."""
    fake.kv_capacity_tokens = 8
    try:
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model=MODEL, prompt="a prompt of more than eight tokens", max_tokens=2)
    finally:
        fake.kv_capacity_tokens = 1 << 30
    assert info.value.code == "context_length_exceeded"
    assert "KV cache holds 8" in info.value.message


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


def test_a_stopped_engine_ends_its_requests_with_503_model_not_ready() -> None:
    """The server's shutdown stops the engine: a request waiting for its answer gets the JSON 503 (retry
    elsewhere), a running stream its error event and [DONE], not a 500 engine_error."""
    fake = FakeAsyncEngine(step_s=0.05)
    with serve(create_app(fake)) as url:
        body = {"model": MODEL, "prompt": "a", "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=20) as streamed:
            chunks = streamed.iter_bytes()
            first = next(chunks)
            fake.hold()
            plain: list[httpx.Response] = []
            waiting = threading.Thread(
                target=lambda: plain.append(post(url, "/v1/completions", {"model": MODEL, "prompt": "b"})),
                daemon=True,
            )
            waiting.start()
            assert wait_until(lambda: len(fake.waiting) == 1)
            fake.stop_from_thread()
            events = (first + b"".join(chunks)).decode().split("\n\n")
        waiting.join(timeout=10)
    assert_error(plain[0], 503, "model_not_ready")
    assert plain[0].headers["retry-after"] == "1"
    assert "shutting down" in plain[0].json()["error"]["message"]
    assert events[-2:] == ["data: [DONE]", ""]
    error = json.loads(events[-3].removeprefix("data: "))["error"]
    assert error["code"] == "model_not_ready" and "shutting down" in error["message"]
