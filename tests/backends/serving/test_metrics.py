"""The server's Prometheus registry: engine stats read at each scrape, request histograms per model."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from backends.engine.stats import EngineStats
from backends.serving.metrics import ServerMetrics


def samples(metrics: ServerMetrics) -> dict[tuple[str, str], float]:
    families = text_string_to_metric_families(metrics.render().decode())
    return {(s.name, s.labels.get("model_name", "")): s.value for f in families for s in f.samples}


def stats(num_running: int, num_generated_tokens: int) -> EngineStats:
    return EngineStats(
        num_running=num_running,
        num_waiting=2,
        kv_cache_usage=0.25,
        num_blocks_total=8,
        num_blocks_free=6,
        prefix_cache_queries=10,
        prefix_cache_hits=4,
        num_preemptions=1,
        num_generated_tokens=num_generated_tokens,
        num_prompt_tokens=30,
    )


def test_engine_stats_are_read_at_each_scrape_and_zero_while_loading() -> None:
    metrics = ServerMetrics()
    current: list[EngineStats | None] = [None]
    metrics.watch("m", lambda: current[0])
    assert samples(metrics)[("vllm:num_requests_running", "m")] == 0.0
    current[0] = stats(num_running=3, num_generated_tokens=50)
    scraped = samples(metrics)
    assert scraped[("vllm:num_requests_running", "m")] == 3.0
    assert scraped[("vllm:num_requests_waiting", "m")] == 2.0
    assert scraped[("vllm:kv_cache_usage_perc", "m")] == 0.25
    assert scraped[("vllm:prefix_cache_hits_total", "m")] == 4.0
    assert scraped[("vllm:generation_tokens_total", "m")] == 50.0


def test_request_histograms_carry_the_model_name() -> None:
    metrics = ServerMetrics()
    view = metrics.model("m")
    view.observe_first_token(0.02)
    view.observe_inter_token(0.01, 3)
    view.observe_finished(0.5, "stop")
    scraped = samples(metrics)
    assert scraped[("vllm:time_to_first_token_seconds_count", "m")] == 1.0
    assert scraped[("vllm:time_per_output_token_seconds_count", "m")] == 3.0
    assert scraped[("vllm:e2e_request_latency_seconds_count", "m")] == 1.0
    assert scraped[("vllm:request_success_total", "m")] == 1.0


def test_speculative_counters_use_vllms_names() -> None:
    metrics = ServerMetrics()
    spec = EngineStats(
        num_running=1,
        num_waiting=0,
        kv_cache_usage=0.0,
        num_blocks_total=8,
        num_blocks_free=8,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        num_preemptions=0,
        num_generated_tokens=9,
        num_prompt_tokens=3,
        spec_num_drafts=3,
        spec_num_draft_tokens=12,
        spec_num_accepted_tokens=5,
        spec_accepted_per_pos=(3, 2, 0, 0),
    )
    metrics.watch("m", lambda: spec)
    families = text_string_to_metric_families(metrics.render().decode())
    scraped = {(s.name, s.labels.get("position", "")): s.value for f in families for s in f.samples}
    assert scraped[("vllm:spec_decode_num_drafts_total", "")] == 3.0
    assert scraped[("vllm:spec_decode_num_draft_tokens_total", "")] == 12.0
    assert scraped[("vllm:spec_decode_num_accepted_tokens_total", "")] == 5.0
    assert scraped[("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0")] == 3.0
    assert scraped[("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1")] == 2.0
