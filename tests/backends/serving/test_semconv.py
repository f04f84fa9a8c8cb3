"""The engine names its spans' attributes itself (it ships without the gateway); every name both sides
use must be spelled the same, or a trace across the two would not line up."""

from __future__ import annotations

from backends.serving import semconv as engine
from gateway.telemetry import semconv as gateway


def _names(module: object) -> dict[str, str]:
    return {k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}


def test_names_both_sides_define_are_spelled_the_same() -> None:
    ours, theirs = _names(engine), _names(gateway)
    shared = ours.keys() & theirs.keys()
    assert {"GEN_AI_OPERATION_NAME", "GEN_AI_REQUEST_MODEL", "HTTP_ROUTE", "TRACER_NAME"} <= shared
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
