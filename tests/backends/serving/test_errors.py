"""Every refusal leaves in OpenAI's error shape: bad JSON, unknown models and routes, the wording."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.backends.serving.fake_engine import MODEL
from tests.backends.serving.harness import assert_error, chat, post


def test_invalid_json_is_400(base_url: str) -> None:
    assert_error(post(base_url, "/v1/chat/completions", b"{not json"), 400, "invalid_json")
    assert_error(post(base_url, "/v1/chat/completions", b""), 400, "invalid_json")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        for depth in (1_000, 100_000):  # msgspec's own limit is near 1,000: a 400, never a 500
            deep = b'{"model": "m", "x": ' + b"[" * depth + b"]" * depth + b"}"
            assert_error(post(base_url, path, deep), 400, "invalid_json")
    assert_error(post(base_url, "/v1/chat/completions", b"[1, 2]"), 400)


def test_refusals_are_worded_as_openai_words_them(base_url: str) -> None:
    response = post(base_url, "/v1/chat/completions", chat(stream="yes"))
    assert response.json()["error"] == {
        "message": "Invalid value for 'stream': expected `bool | null`, got `str`.",
        "type": "invalid_request_error",
        "param": "stream",
        "code": "invalid_value",
    }
    error = post(base_url, "/v1/chat/completions", {"model": MODEL}).json()["error"]
    assert (error["param"], error["code"]) == ("messages", "missing_required_parameter")
    assert_error(post(base_url, "/v1/completions", {"model": MODEL, "prompt": "x", "echo": True}), 400,
                 "unsupported_value", "echo")  # fmt: skip
    assert_error(httpx.get(f"{base_url}/v1/nothing"), 404, "not_found")


def test_unknown_model_is_404(client: openai.OpenAI, base_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "Hi"}])
    assert info.value.code == "model_not_found"
    assert_error(post(base_url, "/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404, "model_not_found")
    assert_error(post(base_url, "/v1/embeddings", {"model": MODEL, "input": "x"}), 404, "model_not_found")
    assert_error(httpx.get(f"{base_url}/v1/models/gpt-9"), 404, "model_not_found")


def test_unknown_route_and_method_are_openai_shaped(base_url: str) -> None:
    assert_error(httpx.get(f"{base_url}/v1/nothing"), 404)
    wrong = httpx.get(f"{base_url}/v1/chat/completions")
    assert_error(wrong, 405)
    allowed = {method.strip() for method in wrong.headers["allow"].split(",")}  # RFC 9110: a 405 names
    assert "POST" in allowed and "GET" not in allowed  # the methods that work (Litestar adds OPTIONS)
