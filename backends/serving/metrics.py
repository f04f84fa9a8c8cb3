"""The server's Prometheus metrics, under vLLM's names so a gateway built for vLLM reads its load.

Engine gauges and counters (running, waiting, KV usage, prefix cache, preemptions, token totals,
speculative drafts and acceptances) are
read from ``EngineStats`` at scrape time; latency histograms are observed by the server per request.
Every metric carries the ``model_name`` label. One registry per app: no module globals.

Beyond vLLM's names: ``sortyard_engine_batch_size`` (sequences in the running batch) and
``sortyard_engine_generation_tokens_per_second`` (generated tokens per second over the last
``RATE_WINDOW_S`` of scrapes; ``rate(vllm:generation_tokens_total[1m])`` says the same in PromQL).

Models on a CUDA device also get ``vllm:gpu_cache_usage_perc`` (vLLM's older name of the KV usage, which
dashboards built for vLLM before v0.10 read) and ``sortyard_engine_gpu_memory_bytes{kind}``: torch's
``allocated`` (tensors) and ``reserved`` (its caching allocator's hold) bytes on the model's device.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backends.engine.stats import EngineStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RATE_WINDOW_S = 60.0

# vLLM's buckets, so dashboards built for it line up
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TPOT_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


class ServerMetrics:
    """The registry of one server (every model it serves), its request histograms, and the
    engine-stats collector; ``model(name)`` gives the per-model view requests record into."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        labels = ["model_name"]
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time from request arrival to its first generated token.",
            labels,
            buckets=TTFT_BUCKETS_S,
            registry=self.registry,
        )
        self._tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Time between generated tokens of a request, per token.",
            labels,
            buckets=TPOT_BUCKETS_S,
            registry=self.registry,
        )
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Time from request arrival to its last token.",
            labels,
            buckets=E2E_BUCKETS_S,
            registry=self.registry,
        )
        self._success = Counter(
            "vllm:request_success",
            "Finished requests, by finish reason.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self._stats = _EngineStatsCollector()
        self.registry.register(self._stats)

    def model(self, model_name: str) -> ModelMetrics:
        """The view one served model's requests record into."""
        return ModelMetrics(self, model_name)

    def watch(self, model_name: str, read_stats: Callable[[], EngineStats | None]) -> None:
        """Read this model's engine stats (None while it loads) at every scrape."""
        self._stats.add(model_name, read_stats)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class ModelMetrics:
    """What a request records, labelled with the model that served it."""

    def __init__(self, server: ServerMetrics, model_name: str) -> None:
        self.model_name = model_name
        self._ttft = server._ttft.labels(model_name)
        self._tpot = server._tpot.labels(model_name)
        self._e2e = server._e2e.labels(model_name)
        self._success = server._success

    def observe_first_token(self, ttft_s: float) -> None:
        self._ttft.observe(ttft_s)

    def observe_inter_token(self, per_token_s: float, num_tokens: int) -> None:
        for _ in range(num_tokens):
            self._tpot.observe(per_token_s)

    def observe_finished(self, e2e_s: float, finish_reason: str) -> None:
        self._e2e.observe(e2e_s)
        self._success.labels(self.model_name, finish_reason).inc()


class _EngineStatsCollector(Collector):
    """Reads each model's ``EngineStats`` at each scrape; all zeros while its engine is still loading."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._models: dict[str, Callable[[], EngineStats | None]] = {}
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        """(time, generated tokens) at recent scrapes per model, for tokens per second."""

    def add(self, model_name: str, read_stats: Callable[[], EngineStats | None]) -> None:
        self._models[model_name] = read_stats
        self._samples[model_name] = deque()

    def _tokens_per_second(self, model_name: str, num_generated: float) -> float:
        now = self._clock()
        samples = self._samples[model_name]
        samples.append((now, num_generated))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()  # keep one sample at least a window old, if there is one
        then, tokens = samples[0]
        if now - then <= 0 or num_generated < tokens:
            return 0.0
        return (num_generated - tokens) / (now - then)

    def collect(self) -> Iterator[Metric]:
        snapshots = {name: read() for name, read in self._models.items()}

        def family(
            kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, doc: str, attr: str
        ) -> Metric:
            metric = kind(name, doc, labels=["model_name"])
            for model_name, stats in snapshots.items():
                value = float(getattr(stats, attr, 0) or 0) if stats is not None else 0.0
                metric.add_metric([model_name], value)
            return metric

        gauges = (
            ("vllm:num_requests_running", "Requests in the running batch.", "num_running"),
            ("vllm:num_requests_waiting", "Requests waiting to be scheduled.", "num_waiting"),
            ("vllm:kv_cache_usage_perc", "Share of KV-cache blocks in use (1 = full).", "kv_cache_usage"),
            ("sortyard_engine_batch_size", "Sequences in the running batch.", "num_running"),
        )
        for name, doc, attr in gauges:
            yield family(GaugeMetricFamily, name, doc, attr)
        yield from _gpu_families({n: s for n, s in snapshots.items() if s is not None and s.is_cuda})
        counters = (
            (
                "vllm:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache.",
                "prefix_cache_queries",
            ),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", "prefix_cache_hits"),
            ("vllm:num_preemptions", "Requests preempted to free KV blocks.", "num_preemptions"),
            ("vllm:prompt_tokens", "Prompt tokens processed.", "num_prompt_tokens"),
            ("vllm:generation_tokens", "Tokens generated.", "num_generated_tokens"),
            (
                "vllm:spec_decode_num_drafts",
                "Speculative steps: sequences that verified proposals.",
                "spec_num_drafts",
            ),
            ("vllm:spec_decode_num_draft_tokens", "Proposed tokens verified.", "spec_num_draft_tokens"),
            ("vllm:spec_decode_num_accepted_tokens", "Proposed tokens accepted.", "spec_num_accepted_tokens"),
        )
        for name, doc, attr in counters:
            yield family(CounterMetricFamily, name, doc, attr)
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Proposed tokens accepted, by position in the proposal.",
            labels=["model_name", "position"],
        )
        for model_name, stats in snapshots.items():
            for position, count in enumerate(getattr(stats, "spec_accepted_per_pos", ()) or ()):
                per_pos.add_metric([model_name, str(position)], float(count))
        yield per_pos
        rate = GaugeMetricFamily(
            "sortyard_engine_generation_tokens_per_second",
            f"Generated tokens per second since the oldest scrape in the last {RATE_WINDOW_S:.0f} s.",
            labels=["model_name"],
        )
        for model_name, stats in snapshots.items():
            generated = float(getattr(stats, "num_generated_tokens", 0) or 0) if stats is not None else 0.0
            rate.add_metric([model_name], self._tokens_per_second(model_name, generated))
        yield rate

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _gpu_families(snapshots: dict[str, EngineStats]) -> Iterator[Metric]:
    """The GPU metrics of the models on a CUDA device; nothing when none is."""
    if not snapshots:
        return
    usage = GaugeMetricFamily(
        "vllm:gpu_cache_usage_perc", "Share of KV-cache blocks in use (1 = full).", labels=["model_name"]
    )
    memory = GaugeMetricFamily(
        "sortyard_engine_gpu_memory_bytes",
        "Bytes torch holds on the model's GPU: in tensors (allocated) or in its caching allocator "
        "(reserved).",
        labels=["model_name", "kind"],
    )
    for model_name, stats in snapshots.items():
        usage.add_metric([model_name], stats.kv_cache_usage)
        memory.add_metric([model_name, "allocated"], float(stats.gpu_memory_allocated_bytes))
        memory.add_metric([model_name, "reserved"], float(stats.gpu_memory_reserved_bytes))
    yield usage
    yield memory
