"""Every span name and span attribute name Sortyard emits, in one place.

The GenAI names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, still marked
"development" upstream): when they change, change them here. Names of our own live under
``sortyard.*``. The engine (``backends.serving.tracing``) imports its names from here too, so the
gateway's and the engine's spans always agree.
"""

from __future__ import annotations

# --- span names -----------------------------------------------------------------------------------
TRACER_NAME = "sortyard"
ENGINE_TRACER_NAME = "sortyard.engine"


def server_span_name(method: str, route: str) -> str:
    """HTTP server span: ``POST /v1/chat/completions`` (HTTP semantic conventions)."""
    return f"{method} {route}"


def stage_span_name(stage: str) -> str:
    """One pipeline stage: ``sortyard.auth``, ``sortyard.limits``, ``sortyard.cache``, ..."""
    return _STAGE_NAMES.get(stage) or _STAGE_NAMES.setdefault(stage, f"sortyard.{stage}")


_STAGE_NAMES: dict[str, str] = {}


def inference_span_name(operation: str, model: str) -> str:
    """GenAI client span: ``{gen_ai.operation.name} {gen_ai.request.model}``, e.g. ``chat gpt-4o-mini``."""
    return f"{operation} {model}"


ENGINE_QUEUE_SPAN = "engine.queue_wait"
"""Engine: from submission to the scheduler's first pick of the request."""
ENGINE_PREFILL_SPAN = "engine.prefill"
"""Engine: from the first schedule to the first generated token."""
ENGINE_DECODE_SPAN = "engine.decode"
"""Engine: from the first generated token to the last."""

# --- GenAI attributes -----------------------------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
"""Prompt content (JSON); only when the policy's ``telemetry.capture_content`` opts in."""
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
"""Completion content (JSON); only when ``capture_content`` opts in (plain responses only)."""

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

# --- other conventions ----------------------------------------------------------------------------
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# --- Sortyard's own -----------------------------------------------------------------------------
REQUEST_ID = "sortyard.request_id"
TENANT = "sortyard.tenant"
POOL = "sortyard.pool"
REPLICA = "sortyard.replica"
ROUTE_REASON = "sortyard.route.reason"
CACHE_RESULT = "sortyard.cache.result"
ATTEMPT = "sortyard.upstream.attempt"
IS_STREAM = "sortyard.request.stream"
ENGINE_TIMING = "sortyard.engine.timing"
"""``engine`` when the engine reported its schedule time, ``derived`` when the server inferred it."""
ENGINE_NUM_CACHED_TOKENS = "sortyard.engine.num_cached_tokens"
