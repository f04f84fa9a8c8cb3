"""Anthropic's error shape from the gateway's (OpenAI-shaped) errors, its type by status."""

from __future__ import annotations

import json

import pytest

from gateway.anthropic.errors import error_event, error_type, from_openai_body
from gateway.errors import InvalidRequest, RateLimited


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ],
)
def test_types_by_status(status: int, kind: str) -> None:
    assert error_type(status) == kind


def test_a_gateway_error_names_its_param_in_the_message() -> None:
    body = json.loads(from_openai_body(400, InvalidRequest("bad", param="max_tokens").to_json(), "req_1"))
    assert body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: bad"},
        "request_id": "req_1",
    }
    limited = json.loads(from_openai_body(429, RateLimited("slow down").to_json()))
    assert limited["error"] == {"type": "rate_limit_error", "message": "slow down"}


def test_a_body_that_is_not_an_envelope_is_kept_as_the_message() -> None:
    assert json.loads(from_openai_body(502, b"Bad Gateway"))["error"]["message"] == "Bad Gateway"


def test_an_error_event() -> None:
    event = error_event(529, "busy")
    assert event.startswith(b"event: error\ndata: ") and event.endswith(b"\n\n")
    assert json.loads(event.split(b"data: ", 1)[1])["error"]["type"] == "overloaded_error"
