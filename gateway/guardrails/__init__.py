"""Guardrails: checks on a request's prompt and on its answer, by named sets in the policy.

``config`` (the policy's ``guardrails:`` section), the detectors (``pii``, ``secrets``, ``block_list``,
each finding spans of one text; ``webhook``, an external service's verdict), ``findings`` (a span and
redaction), ``guard`` (a set's checks compiled once per policy), ``texts`` (where a request's and an
answer's text sits in the body) and ``stream`` (an SSE answer checked event by event). The pipeline
stage is ``gateway.stages.guardrails``.
"""

from gateway.guardrails.config import GuardrailSet

__all__ = ["GuardrailSet"]
