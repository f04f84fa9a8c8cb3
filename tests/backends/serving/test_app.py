"""The app's own routes over the in-memory engine twin: models, health, readiness and metrics."""

from __future__ import annotations

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.backends.serving.fake_engine import MODEL


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL, "all-minilm-l6-v2"]
    assert client.models.retrieve(MODEL).id == MODEL


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
