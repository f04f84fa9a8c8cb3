"""The span and attribute names the engine server emits.

The GenAI names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, still marked
"development" upstream), the others the HTTP and error conventions; names of our own live under
``sortyard.*``. They are the strings the gateway writes on its spans too, so one trace reads the same
in both processes.
"""

from __future__ import annotations

TRACER_NAME = "sortyard"
"""The instrumentation scope of every span."""


def server_span_name(method: str, route: str) -> str:
    """HTTP server span: ``POST /v1/chat/completions`` (HTTP semantic conventions)."""
    return f"{method} {route}"


# --- span names -----------------------------------------------------------------------------------
ENGINE_QUEUE_SPAN = "engine.queue_wait"
"""From submission to the scheduler's first pick of the request."""
ENGINE_PREFILL_SPAN = "engine.prefill"
"""From the first schedule to the first generated token."""
ENGINE_DECODE_SPAN = "engine.decode"
"""From the first generated token to the last."""

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
