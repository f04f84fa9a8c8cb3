"""What the policy says about telemetry: trace sampling, content capture, access logs, tenant labels.

Where traces go is not the policy's business: the exporter is set by the standard ``OTEL_*``
environment variables (see ``gateway.telemetry.tracing``). A few ``SORTYARD_*`` variables override
the policy for one process (handy for benchmarks and incidents):

- ``SORTYARD_TRACE_SAMPLING_RATIO``  a float in [0, 1]
- ``SORTYARD_ACCESS_LOG``            ``0``/``1`` (also ``false``/``true``, ``off``/``on``)
- ``SORTYARD_CAPTURE_CONTENT``       ``0``/``1``
- ``SORTYARD_TENANT_LABELS``         ``0``/``1``
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

Ratio = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class TelemetryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The policy's ``telemetry:`` section."""

    sampling_ratio: Ratio = 0.01
    """Share of new traces recorded (``ParentBased(TraceIdRatioBased)``: a caller's sampled
    ``traceparent`` is always followed). Matters only when an exporter is configured."""
    capture_content: bool = False
    """Put prompt and completion text on spans (``gen_ai.input.messages`` / ``output.messages``).
    Off by default: prompts are often personal data."""
    access_log: bool = True
    """One JSON line per request on the ``sortyard.access`` logger (never keys or prompts)."""
    tenant_labels: bool = False
    """Label token counters by tenant too (one time series per tenant: keep off with many tenants)."""
    provider_name: str = "openai"
    """``gen_ai.provider.name`` of upstream calls: the API family the replicas speak."""


DEFAULT = TelemetryConfig()

_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no"}


def _flag(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}: expected 0/1, true/false or on/off, got {raw!r}")


def telemetry_of(policy: Any, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
    """The policy's telemetry section (the default when it has none) with the env overrides applied."""
    config = getattr(policy, "telemetry", None)
    if not isinstance(config, TelemetryConfig):
        config = DEFAULT
    env = os.environ if environ is None else environ
    changes: dict[str, Any] = {}
    raw = env.get("SORTYARD_TRACE_SAMPLING_RATIO")
    if raw:
        ratio = float(raw)
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"SORTYARD_TRACE_SAMPLING_RATIO: expected a ratio in [0, 1], got {raw!r}")
        changes["sampling_ratio"] = ratio
    for field, var in (
        ("access_log", "SORTYARD_ACCESS_LOG"),
        ("capture_content", "SORTYARD_CAPTURE_CONTENT"),
        ("tenant_labels", "SORTYARD_TENANT_LABELS"),
    ):
        raw = env.get(var)
        if raw:
            changes[field] = _flag(raw, var)
    return msgspec.structs.replace(config, **changes) if changes else config
