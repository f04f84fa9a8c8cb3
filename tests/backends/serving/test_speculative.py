"""A server whose engine speculates (n-gram) answers exactly what a plain one does, streamed or not,
through the openai SDK, and exports the acceptance counters under vLLM's names."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.serving.app import create_app
from tests.backends.engine.tiny import build_tiny_model
from tests.backends.serving.harness import serve

PROMPT = [10, 20, 30, 40, 50, 10, 20, 30, 40, 50, 10, 20, 30] * 2


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    model = build_tiny_model(tmp_path_factory.mktemp("spec-tiny") / "llama", "gqa")

    def engine(**opts: object) -> AsyncLLMEngine:
        config = EngineConfig(model=str(model), device="cpu", kv_cache_bytes=2 << 20, num_threads=1, **opts)  # type: ignore[arg-type]
        return AsyncLLMEngine(LLMEngine(config))

    with (
        serve(create_app(engine(), served_model_name="tiny")) as plain,
        serve(create_app(engine(speculative_method="ngram"), served_model_name="tiny")) as spec,
    ):
        yield {"plain": plain, "spec": spec}


def complete(url: str, *, stream: bool) -> str:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        kwargs = {"model": "tiny", "prompt": PROMPT, "max_tokens": 30, "temperature": 0}
        if not stream:
            return client.completions.create(**kwargs, extra_body={"ignore_eos": True}).choices[0].text  # type: ignore[call-overload]
        chunks = client.completions.create(**kwargs, stream=True, extra_body={"ignore_eos": True})  # type: ignore[call-overload]
        return "".join(c.choices[0].text for c in chunks if c.choices)


def test_answers_match_a_plain_server(urls: dict[str, str]) -> None:
    expected = complete(urls["plain"], stream=False)
    assert complete(urls["spec"], stream=False) == expected
    assert complete(urls["spec"], stream=True) == expected


def test_acceptance_counters_are_exported(urls: dict[str, str]) -> None:
    complete(urls["spec"], stream=False)
    text = httpx.get(f"{urls['spec']}/metrics", timeout=10).text
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["vllm:spec_decode_num_drafts_total"] > 0
    assert (
        0
        <= samples["vllm:spec_decode_num_accepted_tokens_total"]
        <= samples["vllm:spec_decode_num_draft_tokens_total"]
    )
