"""The span and attribute names both the gateway and the engine server write, in one place, so a trace
across the two processes lines up.

The GenAI names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, still marked
"development" upstream): when they change, change them here. The others follow the HTTP and error
conventions; names of our own live under ``sortyard.*``. The names only the gateway writes (its
stages, upstream attempts, tenants, pools) are in ``gateway.telemetry.semconv``.
"""

from __future__ import annotations

TRACER_NAME = "sortyard"
"""The instrumentation scope of every span, in both processes."""


# --- span names -----------------------------------------------------------------------------------
def server_span_name(method: str, route: str) -> str:
    """HTTP server span: ``POST /v1/chat/completions`` (HTTP semantic conventions)."""
    return f"{method} {route}"


ENGINE_QUEUE_SPAN = "engine.queue_wait"
"""Engine: from submission to the scheduler's first pick of the request."""
ENGINE_PREFILL_SPAN = "engine.prefill"
"""Engine: from the first schedule to the first generated token."""
ENGINE_DECODE_SPAN = "engine.decode"
"""Engine: from the first generated token to the last."""

# --- GenAI attributes -----------------------------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

REQUEST_PARAMETERS: dict[str, str] = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
    "stop": "gen_ai.request.stop_sequences",
}
"""Request body field -> GenAI attribute (the request parameters the conventions name)."""

# --- HTTP and error attributes --------------------------------------------------------------------
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
ERROR_TYPE = "error.type"

# --- Sortyard's own -----------------------------------------------------------------------------
IS_STREAM = "sortyard.request.stream"
ENGINE_TIMING = "sortyard.engine.timing"
"""``engine`` when the engine reported its schedule time, ``derived`` when the server inferred it."""
ENGINE_NUM_CACHED_TOKENS = "sortyard.engine.num_cached_tokens"
