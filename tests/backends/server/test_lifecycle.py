"""Start-up: the port answers while the weights load (/ready 503), and a failed load is reported."""

from __future__ import annotations

import threading

import httpx
import pytest

from backends.serving.app import create_app
from backends.serving.engine_client import AsyncEngineLike
from tests.backends.server.fake_engine import FakeAsyncEngine
from tests.backends.server.harness import serve, wait_until

CHAT = {"model": "tiny-fake", "messages": [{"role": "user", "content": "Hi"}]}


def test_ready_is_503_until_the_engine_is_loaded() -> None:
    loaded = threading.Event()
    engine = FakeAsyncEngine()

    def factory() -> AsyncEngineLike:
        assert loaded.wait(timeout=10)
        return engine

    with serve(create_app(engine_factory=factory, served_model_name="tiny-fake")) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        response = httpx.get(f"{url}/ready")
        assert response.status_code == 503 and response.json()["status"] == "loading"
        busy = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
        assert busy.status_code == 503
        assert busy.json()["error"]["code"] == "model_not_ready"
        assert busy.headers["retry-after"] == "1"
        assert httpx.get(f"{url}/metrics").status_code == 200  # zeros while loading
        loaded.set()
        assert wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200)
        assert engine.is_started
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT).status_code == 200
    assert not engine.is_started  # stopped with the app


def test_failed_load_is_reported() -> None:
    def factory() -> AsyncEngineLike:
        raise FileNotFoundError("no such model")

    with serve(create_app(engine_factory=factory, served_model_name="tiny-fake")) as url:
        assert wait_until(lambda: httpx.get(f"{url}/health").status_code == 503)
        ready = httpx.get(f"{url}/ready")
        assert ready.status_code == 503 and "no such model" in ready.json()["detail"]
        chat = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
        assert chat.status_code == 503 and "no such model" in chat.json()["error"]["message"]


def test_create_app_needs_one_engine_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        create_app()
    with pytest.raises(ValueError, match="served_model_name"):
        create_app(engine_factory=FakeAsyncEngine)
