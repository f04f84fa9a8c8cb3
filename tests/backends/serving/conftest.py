"""The contract tests' server: a real uvicorn serving the in-memory engine twin and a fake embedder, one
per test module."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from backends.serving.app import create_app
from tests.backends.serving.fake_engine import FakeAsyncEngine, FakeEmbedder
from tests.backends.serving.harness import serve


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
