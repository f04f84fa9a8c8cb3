"""sortyard/openai_errors.py: OpenAI's error envelope, every field present, as both servers send it."""

from __future__ import annotations

import json

import msgspec

from sortyard.openai_errors import ErrorBody, ErrorEnvelope, error_envelope, error_json


def test_the_envelope_has_every_field_in_openais_order() -> None:
    body = error_json("The model `x` does not exist.", "invalid_request_error", "model", "model_not_found")
    assert body == (
        b'{"error":{"message":"The model `x` does not exist.","type":"invalid_request_error",'
        b'"param":"model","code":"model_not_found"}}'
    )


def test_unset_param_and_code_are_null_not_missing() -> None:
    assert json.loads(error_json("boom", "server_error")) == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }


def test_the_struct_and_the_bytes_agree() -> None:
    envelope = error_envelope("slow down", "rate_limit_error", code="rate_limit_exceeded")
    assert envelope == ErrorEnvelope(ErrorBody("slow down", "rate_limit_error", None, "rate_limit_exceeded"))
    assert msgspec.json.encode(envelope) == error_json(
        "slow down", "rate_limit_error", None, "rate_limit_exceeded"
    )


def test_an_envelope_decodes_back() -> None:
    raw = error_json('quote " and unicode é', "invalid_request_error", "messages[0]", "invalid_value")
    decoded = msgspec.json.decode(raw, type=ErrorEnvelope)
    assert decoded.error.message == 'quote " and unicode é' and decoded.error.param == "messages[0]"
