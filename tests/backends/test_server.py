"""``EngineServer``'s shutdown: a stream still running when the graceful timeout nears ends through the app
(its error event and ``[DONE]``, not a cut connection), one that finishes in time is untouched, and the
server then exits."""

from __future__ import annotations

import json
import threading

import httpx
import uvicorn

from backends.server import EngineServer, parse_args
from backends.serving.app import create_app
from tests.backends.serving.fake_engine import MODEL, FakeAsyncEngine
from tests.backends.serving.harness import free_port, wait_until


def test_shutdown_timeout_defaults_to_5_s() -> None:
    assert parse_args([]).shutdown_timeout == 5.0
    assert parse_args(["--shutdown-timeout", "1.5"]).shutdown_timeout == 1.5


def test_shutdown_ends_the_running_streams_through_the_app() -> None:
    fake = FakeAsyncEngine(step_s=0.05)
    app = create_app(fake)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = EngineServer(config, app.state["serving"])
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, timeout_s=30)
    bodies: dict[int, bytes] = {}

    def stream(max_tokens: int) -> None:
        body = {"model": MODEL, "prompt": "a", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=20) as r:
            bodies[max_tokens] = r.read()  # an incomplete chunked read raises here

    # 0.5 s of steps (done before the engine stops, at 1 s), and 20 s
    clients = [threading.Thread(target=stream, args=(n,), daemon=True) for n in (10, 400)]
    for client in clients:
        client.start()
    assert wait_until(lambda: len(fake.running) == 2)
    server.should_exit = True  # what SIGTERM does
    for client in clients:
        client.join(timeout=10)
    thread.join(timeout=10)
    assert not thread.is_alive()

    finished = bodies[10].decode().split("\n\n")
    assert finished[-2:] == ["data: [DONE]", ""]
    assert json.loads(finished[-3].removeprefix("data: "))["choices"][0]["finish_reason"] == "length"
    cut = bodies[400].decode().split("\n\n")
    assert cut[-2:] == ["data: [DONE]", ""]
    error = json.loads(cut[-3].removeprefix("data: "))["error"]
    assert error["code"] == "model_not_ready" and "shutting down" in error["message"]
