"""The Grafana dashboard and the Prometheus config in deploy/ load, and every PromQL metric exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from backends.serving.metrics import ServerMetrics
from gateway.telemetry.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"(?<![\w:])((?:sortyard_|vllm:)[A-Za-z0-9_:]*)")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("", "_sum", "_count", "_created"),
}


def exposed_names() -> set[str]:
    """Every sample name the gateway's and the engine's /metrics can carry (labelled or not)."""
    names: set[str] = set()
    engine = ServerMetrics()
    engine.model("m")
    engine.watch("m", lambda: None)
    for text in (Metrics().render(), engine.render()):
        for family in text_string_to_metric_families(text.decode()):
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def test_dashboard_queries_name_real_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "sortyard-dashboard.json").read_text())
    names = exposed_names()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 16
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used and used <= names, sorted(used - names)
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("p99", "first token", "tokens/s", "cache hit", "rejections", "health", "kv cache"):
        assert topic in titles, topic
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_prometheus_config_scrapes_gateway_and_engine() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"sortyard-gateway", "sortyard-engine"} <= set(jobs)
    assert all(job["static_configs"][0]["targets"] for job in jobs.values())
