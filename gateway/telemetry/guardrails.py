"""``GuardrailMetrics``: what the guardrails did, on the gateway's registry (``/metrics``):
``sortyard_guardrail_actions_total{guardrail, check, stage, action}``: one count per finding acted on
(``check`` is what was found: ``email``, ``card``, ``openai_key``, ``block_list``, ``webhook``, ...;
``stage`` is ``input`` or ``output``; ``action`` is ``redact`` or ``block``). Never the text itself."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["GuardrailMetrics"]


class GuardrailMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.actions = Counter(
            "sortyard_guardrail_actions",
            "Guardrail findings acted on: the set, what was found, the side (input or output) and "
            "the action (redact or block).",
            ["guardrail", "check", "stage", "action"],
            registry=registry,
        )

    def count(self, guardrail: str, check: str, stage: str, action: str) -> None:
        self.actions.labels(guardrail, check, stage, action).inc()
