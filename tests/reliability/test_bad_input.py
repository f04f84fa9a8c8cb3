"""Bad bodies get a clear OpenAI-shaped 4xx from every proxied endpoint: never a 500, never a hang.

The corpus covers what a fuzzer or a careless client sends: nesting past any sane depth, wrong types
and nulls where OpenAI's schema has none, bad encodings, duplicate keys, huge numbers. Each body goes
to all three proxied endpoints; the answer must be a 2xx or a 4xx in OpenAI's error shape.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from gateway.schemas import MAX_JSON_DEPTH
from tools.servers.gateway_server import GatewayServer

ENDPOINTS = {
    "/v1/chat/completions": "messages",
    "/v1/completions": "prompt",
    "/v1/embeddings": "input",
}
HI = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "input": "hi"}


def _deep(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def _body(endpoint: str, **fields: object) -> dict[str, object]:
    field = ENDPOINTS[endpoint]
    return {"model": "small", "temperature": 0, field: HI[field], **fields}


def _assert_openai_error(response: httpx.Response, status: int | None = None) -> dict[str, object]:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    if status is not None:
        assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 985, 995, 10_000, 100_000])
@pytest.mark.parametrize("shape", ["array", "object"])
@pytest.mark.parametrize("where", ["the field", "an unknown field", "the whole body"])
def test_deep_nesting_is_a_400(
    gateway: GatewayServer, endpoint: str, depth: int, shape: str, where: str
) -> None:
    nest = _deep(depth) if shape == "array" else '{"a":' * depth + "1" + "}" * depth
    field = ENDPOINTS[endpoint]
    if where == "the field":
        raw = f'{{"model": "small", "temperature": 0, "{field}": {nest}}}'
    elif where == "an unknown field":
        raw = f'{{"model": "small", "temperature": 0, "{field}": "hi", "x": {nest}}}'
    else:
        raw = nest
    response = httpx.post(gateway.url + endpoint, content=raw, timeout=30)
    error = _assert_openai_error(response, 400)
    if where != "the whole body" or shape == "object":
        assert error["code"] == "invalid_json" and "nested" in str(error["message"])


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_nesting_within_the_limit_is_served(gateway: GatewayServer, endpoint: str) -> None:
    # a JSON schema nested deep (but within the limit) in an unknown field goes through untouched
    schema: object = "leaf"
    for _ in range(MAX_JSON_DEPTH - 2):
        schema = {"s": schema}
    response = httpx.post(gateway.url + endpoint, json=_body(endpoint, response_format=schema), timeout=10)
    assert response.status_code == 200, response.text[:300]


CORPUS: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("whitespace", b"   \n"),
    ("null", b"null"),
    ("array", b"[]"),
    ("string", b'"hi"'),
    ("number", b"1e999999"),
    ("truncated", b'{"model": "small", "messages": [{"role": "user", "content": "hi"'),
    ("trailing garbage", b'{"model": "small"} x'),
    ("not utf-8", b'{"model": "small", "messages": "\xff\xfe"}'),
    ("lone surrogate", b'{"model": "small", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("nul byte", b'{"model": "small\\u0000", "messages": []}'),
    ("model null", b'{"model": null, "messages": [], "prompt": "x", "input": "x"}'),
    ("model number", b'{"model": 7, "messages": [], "prompt": "x", "input": "x"}'),
    ("model huge", b'{"model": "' + b"m" * 100_000 + b'", "messages": [], "prompt": "x", "input": "x"}'),
    ("stream null", b'{"model": "small", "stream": null, "messages": [], "prompt": "x", "input": "x"}'),
    ("stream string", b'{"model": "small", "stream": "yes", "messages": [], "prompt": "x", "input": "x"}'),
    (
        "max_tokens huge",
        b'{"model": "small", "max_tokens": 1e400, "messages": [], "prompt": "x", "input": "x"}',
    ),
    (
        "max_tokens negative",
        b'{"model": "small", "max_tokens": -1, "messages": [], "prompt": "x", "input": "x"}',
    ),
    (
        "temperature string",
        b'{"model": "small", "temperature": "hot", "messages": [], "prompt": "x", "input": "x"}',
    ),
    ("duplicate keys", b'{"model": "small", "model": "nope", "messages": [], "prompt": "x", "input": "x"}'),
    ("messages object", b'{"model": "small", "messages": {"role": "user"}, "prompt": {}, "input": {}}'),
    ("message not object", b'{"model": "small", "messages": [1, 2], "prompt": [null], "input": [null]}'),
    (
        "big int",
        b'{"model": "small", "n": 123456789012345678901234567890, "messages": [], "prompt": "x", "input": 1}',
    ),
]


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize(("name", "raw"), CORPUS, ids=[name for name, _ in CORPUS])
def test_corpus_gets_openai_shaped_answers(
    gateway: GatewayServer, endpoint: str, name: str, raw: bytes
) -> None:
    response = httpx.post(
        gateway.url + endpoint, content=raw, headers={"content-type": "application/json"}, timeout=30
    )
    if response.status_code == 200:  # a body that is valid for this endpoint after all
        json.loads(response.content)
        return
    _assert_openai_error(response)


BODY = b'{"model": "small", "messages": [{"role": "user", "content": "hi"}]}'
MALFORMED_HTTP = {
    "bad chunk size": b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + BODY + b"\r\n0\r\n\r\n",
    "content-length and transfer-encoding": (
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
        % (len(BODY), len(BODY), BODY)
    ),
    "control byte in a header": b"X-Note: a\x01b\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
}


@pytest.mark.parametrize("rest", list(MALFORMED_HTTP.values()), ids=list(MALFORMED_HTTP))
def test_malformed_http_gets_an_openai_shaped_400(gateway: GatewayServer, rest: bytes) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        conn.sendall(head + rest)
        reply = b""
        while chunk := conn.recv(65536):  # the gateway closes the connection after its answer
            reply += chunk
    status_line, _, rest_of_reply = reply.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400"), reply[:300]
    headers, _, body = rest_of_reply.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in headers.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_http_request" and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
