"""Several models in one engine process: each its own engine, KV pool and queue, listed by /v1/models
and labelled in /metrics; names on the same weights share one engine (loaded once)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.engine.async_engine import AsyncLLMEngine
from backends.server import build_models, parse_args, served_models
from backends.serving.app import create_app
from tests.backends.engine.tiny import build_tiny_model
from tests.backends.serving.harness import serve, wait_until

PROMPT = "one two three"


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("multi-model")
    return build_tiny_model(root / "llama", "gqa"), build_tiny_model(root / "qwen", "qwen2")


def server_args(*models: str) -> argparse.Namespace:
    engine = ["--device", "cpu", "--num-threads", "1", "--kv-cache-bytes", str(4 << 20)]
    engine += ["--max-model-len", "128", "--max-num-seqs", "4"]
    return parse_args([*(a for m in models for a in ("--model", m)), *engine])


@pytest.fixture(scope="module")
def base_url(tiny_dirs: tuple[Path, Path]) -> Iterator[str]:
    llama, qwen = tiny_dirs
    args = server_args(f"small={llama}", f"qwen={qwen}", f"small-alias={llama}")
    with serve(create_app(models=build_models(args))) as url:
        # the engines load in a worker thread after the app starts: wait until both serve
        assert wait_until(lambda: httpx.get(f"{url}/ready").status_code == 200, timeout_s=120)
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def test_served_models_groups_names_by_source(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    same_dir_other_spelling = str(tmp_path / "." / "weights")
    assert served_models(["smollm2-135m", "gemma3-270m"]) == {
        "smollm2-135m": ["smollm2-135m"],
        "gemma3-270m": ["gemma3-270m"],
    }
    grouped = served_models([f"a={weights}", "b=gemma3-270m", f"c={same_dir_other_spelling}"])
    assert list(grouped.values()) == [["a", "c"], ["b"]]
    with pytest.raises(ValueError, match="given twice"):
        served_models(["a=smollm2-135m", "a=gemma3-270m"])
    with pytest.raises(ValueError, match="NAME=SOURCE"):
        served_models(["=smollm2-135m"])


def test_cli_defaults_and_refusals() -> None:
    assert parse_args([]).models == {"smollm2-135m": ["smollm2-135m"]}
    assert parse_args(["--served-model-name", "a", "b"]).models == {"smollm2-135m": ["a", "b"]}
    with pytest.raises(SystemExit):
        parse_args(["--model", "x", "--model", "y", "--served-model-name", "z"])


def test_each_distinct_source_gets_one_engine_and_a_share_of_the_kv_budget(
    tiny_dirs: tuple[Path, Path],
) -> None:
    llama, qwen = tiny_dirs
    specs = build_models(server_args(f"a={llama}", f"b={qwen}", f"c={llama}"))
    assert [spec.names for spec in specs] == [("a", "c"), ("b",)]
    assert specs[0].factory is not None
    engine = specs[0].factory()
    assert isinstance(engine, AsyncLLMEngine)
    assert engine.engine.config.kv_cache_bytes == (4 << 20) // 2


def test_models_lists_every_name_with_its_root(client: openai.OpenAI) -> None:
    cards = {card.id: card.model_extra for card in client.models.list().data}
    assert set(cards) == {"small", "small-alias", "qwen"}
    assert cards["small-alias"] is not None and cards["small-alias"]["root"] == "small"
    assert cards["qwen"] is not None and cards["qwen"]["root"] == "qwen"


def test_each_name_reaches_its_own_model(client: openai.OpenAI) -> None:
    def complete(model: str) -> str:
        out = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
        assert out.model == model
        return out.choices[0].text

    small, alias, qwen = complete("small"), complete("small-alias"), complete("qwen")
    assert small == alias  # the same engine
    assert small != qwen  # two different random models agree on 12 tokens only by accident
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nobody", prompt=PROMPT, max_tokens=1)


def test_metrics_carry_one_series_per_engine(client: openai.OpenAI, base_url: str) -> None:
    client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0
    )
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{base_url}/metrics").text)}
    running = {s.labels["model_name"] for s in families["vllm:num_requests_running"].samples}
    assert running == {"small", "qwen"}  # the alias shares small's engine: no series of its own
    ttft = families["vllm:time_to_first_token_seconds"].samples
    assert any(s.labels["model_name"] == "qwen" and s.name.endswith("_count") and s.value >= 1 for s in ttft)
