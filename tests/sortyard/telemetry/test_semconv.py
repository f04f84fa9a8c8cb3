"""sortyard/telemetry/semconv.py: the names both processes write, spelled as the OpenTelemetry
conventions spell them (a trace from the gateway through the engine reads as one)."""

from __future__ import annotations

from sortyard.telemetry import semconv as sc


def test_the_server_span_is_method_and_route() -> None:
    assert sc.server_span_name("POST", "/v1/chat/completions") == "POST /v1/chat/completions"


def test_convention_names() -> None:
    assert sc.TRACER_NAME == "sortyard"
    assert sc.GEN_AI_OPERATION_NAME == "gen_ai.operation.name"
    assert sc.GEN_AI_REQUEST_MODEL == "gen_ai.request.model"
    assert sc.GEN_AI_USAGE_INPUT_TOKENS == "gen_ai.usage.input_tokens"
    assert sc.HTTP_RESPONSE_STATUS_CODE == "http.response.status_code"
    assert sc.ERROR_TYPE == "error.type"
    assert (sc.ENGINE_QUEUE_SPAN, sc.ENGINE_PREFILL_SPAN, sc.ENGINE_DECODE_SPAN) == (
        "engine.queue_wait",
        "engine.prefill",
        "engine.decode",
    )


def test_every_name_is_namespaced_and_unique() -> None:
    names = {k: v for k, v in vars(sc).items() if k.isupper() and isinstance(v, str) and k != "TRACER_NAME"}
    assert all("." in value for value in names.values()), names
    assert len(set(names.values())) == len(names)
    ours = [v for v in names.values() if not v.startswith(("gen_ai.", "http.", "error.", "engine."))]
    assert all(v.startswith("sortyard.") for v in ours), ours


def test_request_parameters_map_body_fields_to_gen_ai_attributes() -> None:
    assert sc.REQUEST_PARAMETERS["max_tokens"] == sc.REQUEST_PARAMETERS["max_completion_tokens"]
    assert sc.REQUEST_PARAMETERS["stop"] == "gen_ai.request.stop_sequences"
    assert all(v.startswith("gen_ai.request.") for v in sc.REQUEST_PARAMETERS.values())
