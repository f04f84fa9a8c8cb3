"""gateway/telemetry/semconv.py holds only the names the gateway alone writes: a name the engine writes
too lives once, in sortyard.telemetry.semconv, so the two processes cannot spell it differently."""

from __future__ import annotations

from gateway.telemetry import semconv as gateway
from sortyard.telemetry import semconv as shared


def _names(module: object) -> dict[str, object]:
    return {k: v for k, v in vars(module).items() if k.isupper() and not k.startswith("_")}


def test_no_name_is_defined_on_both_sides() -> None:
    ours, theirs = _names(gateway), _names(shared)
    assert not ours.keys() & theirs.keys()
    strings = {v for v in ours.values() if isinstance(v, str)}
    assert not strings & {v for v in theirs.values() if isinstance(v, str)}


def test_gateway_span_names() -> None:
    assert gateway.stage_span_name("auth") == "sortyard.auth"
    assert gateway.stage_span_name("auth") is gateway.stage_span_name("auth")  # made once
    assert gateway.inference_span_name("chat", "gpt-4o-mini") == "chat gpt-4o-mini"
    assert gateway.GEN_AI_PROVIDER_NAME.startswith("gen_ai.")
