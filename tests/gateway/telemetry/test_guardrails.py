"""The guardrail counter: one series per set, check, side and action, on the registry it is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.telemetry.guardrails import GuardrailMetrics


def test_counts_by_labels() -> None:
    registry = CollectorRegistry()
    metrics = GuardrailMetrics(registry)
    metrics.count("strict", "email", "input", "redact")
    metrics.count("strict", "email", "input", "redact")
    metrics.count("strict", "webhook", "output", "block")
    labels = {"guardrail": "strict", "check": "email", "stage": "input", "action": "redact"}
    assert registry.get_sample_value("sortyard_guardrail_actions_total", labels) == 2
    labels = {"guardrail": "strict", "check": "webhook", "stage": "output", "action": "block"}
    assert registry.get_sample_value("sortyard_guardrail_actions_total", labels) == 1
