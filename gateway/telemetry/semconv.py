"""The span and attribute names only the gateway writes: its pipeline stages, its upstream attempts,
its tenants, pools and replicas.

The names the engine server writes too (the request's SERVER span, the GenAI request and usage
attributes, ``http.*``, ``error.type``) are in ``sortyard.telemetry.semconv``, so both processes spell
them the same. The GenAI names here follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``,
still marked "development" upstream): when they change, change them here and there. Names of our own
live under ``sortyard.*``.
"""

from __future__ import annotations


# --- span names -----------------------------------------------------------------------------------
def stage_span_name(stage: str) -> str:
    """One pipeline stage: ``sortyard.auth``, ``sortyard.limits``, ``sortyard.cache``, ..."""
    return _STAGE_NAMES.get(stage) or _STAGE_NAMES.setdefault(stage, f"sortyard.{stage}")


_STAGE_NAMES: dict[str, str] = {}


def inference_span_name(operation: str, model: str) -> str:
    """GenAI client span: ``{gen_ai.operation.name} {gen_ai.request.model}``, e.g. ``chat gpt-4o-mini``."""
    return f"{operation} {model}"


# --- GenAI attributes -----------------------------------------------------------------------------
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
"""Prompt content (JSON); only when the policy's ``telemetry.capture_content`` opts in."""
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
"""Completion content (JSON); only when ``capture_content`` opts in (plain responses only)."""

# --- other conventions ----------------------------------------------------------------------------
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

# --- Sortyard's own -----------------------------------------------------------------------------
REQUEST_ID = "sortyard.request_id"
TENANT = "sortyard.tenant"
POOL = "sortyard.pool"
REPLICA = "sortyard.replica"
ROUTE_REASON = "sortyard.route.reason"
CACHE_RESULT = "sortyard.cache.result"
ATTEMPT = "sortyard.upstream.attempt"
