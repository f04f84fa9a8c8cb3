"""Start-up: while the weights load the port answers 503 (/ready, /v1/models); a failed load is reported."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from backends.embedder import Embedder
from backends.serving.app import create_app
from backends.serving.engine_client import AsyncEngineLike
from tests.backends.serving.fake_engine import FakeAsyncEngine
from tests.backends.serving.harness import serve, wait_until

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


def test_models_answer_503_like_completions_until_the_engine_is_loaded() -> None:
    loaded = threading.Event()
    engine = FakeAsyncEngine()

    def factory() -> AsyncEngineLike:
        assert loaded.wait(timeout=10)
        return engine

    with serve(create_app(engine_factory=factory, served_model_name="tiny-fake")) as url:
        busy = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
        assert busy.status_code == 503
        for path in ("/v1/models", "/v1/models/tiny-fake", "/v1/models/not-known-yet"):
            models = httpx.get(f"{url}{path}")
            assert models.status_code == 503, path
            assert models.json() == busy.json()  # {"error": {message, type, param, code: model_not_ready}}
            assert set(models.json()["error"]) == {"message", "type", "param", "code"}
            assert models.headers["retry-after"] == busy.headers["retry-after"]
        loaded.set()
        assert wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200)
        listed = httpx.get(f"{url}/v1/models")
        assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == ["tiny-fake"]
        assert httpx.get(f"{url}/v1/models/tiny-fake").json()["max_model_len"] == 512
        assert httpx.get(f"{url}/v1/models/not-known-yet").status_code == 404


def test_failed_load_is_reported() -> None:
    def factory() -> AsyncEngineLike:
        raise FileNotFoundError("no such model")

    with serve(create_app(engine_factory=factory, served_model_name="tiny-fake")) as url:
        assert wait_until(lambda: httpx.get(f"{url}/health").status_code == 503)
        ready = httpx.get(f"{url}/ready")
        assert ready.status_code == 503 and "no such model" in ready.json()["detail"]
        chat = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
        assert chat.status_code == 503 and "no such model" in chat.json()["error"]["message"]
        models = httpx.get(f"{url}/v1/models")
        assert models.status_code == 503 and models.json() == chat.json()


def test_create_app_needs_one_engine_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        create_app()
    with pytest.raises(ValueError, match="served_model_name"):
        create_app(engine_factory=FakeAsyncEngine)


def test_the_embedding_model_loads_after_the_engine_not_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' lazy names are not safe to resolve from two threads: one model loads at a time."""
    release = threading.Event()
    order: list[str] = []
    engine = FakeAsyncEngine()

    def factory() -> AsyncEngineLike:
        order.append("engine starts")
        assert release.wait(timeout=10)
        order.append("engine loaded")
        return engine

    embedder = Embedder(Path("/nonexistent"))
    monkeypatch.setattr(embedder, "_load", lambda: order.append("embedder loads"))
    app = create_app(
        engine_factory=factory, served_model_name="tiny-fake", embedder=embedder, load_embedder=True
    )
    with serve(app) as url:
        assert wait_until(lambda: order == ["engine starts"])
        release.set()
        assert wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200)
        assert wait_until(lambda: order == ["engine starts", "engine loaded", "embedder loads"])
