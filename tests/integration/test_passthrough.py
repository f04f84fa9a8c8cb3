"""A pool's pass-through routes (vLLM's ``/tokenize`` and ``/detokenize``) through a real gateway: the
official SDK's generic ``post`` -> the gateway on loopback -> the fake upstream's routes at its origin
(``tools/servers/fake_vllm.py``). A key is needed, the body's ``model`` routes, no token is counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.fake_vllm import MAX_MODEL_LEN, render
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
ADMIN = new_key()
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    document["pools"]["small"]["passthrough_routes"] = ["/tokenize", "/detokenize"]
    document["auth"] = {"required": True}
    # a token budget no chat request fits in (it reserves 256 output tokens): pass-through reserves none
    limits = {"requests_per_minute": 1000, "tokens_per_minute": 10}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "k", "limits": limits},
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    path = write_policy(tmp_path_factory.mktemp("passthrough") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


def _client(gateway: GatewayServer, key: str = KEY) -> openai.OpenAI:
    """The SDK at the server's root, where vLLM serves /tokenize (beside /v1, not under it)."""
    return openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0, timeout=10)


def _post(client: openai.OpenAI, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, cast_to=object, body=body)


def test_tokenize_and_detokenize_reach_the_replica_with_its_served_name(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    client = _client(gateway)
    body = {"model": "gpt-4o-mini", "messages": MESSAGES}
    counted = client.post(
        "/tokenize", cast_to=object, body=body, options={"headers": {"x-request-id": "tok-1"}}
    )
    expected = [ord(c) for c in render({"messages": MESSAGES})]
    assert counted == {
        "count": len(expected),
        "max_model_len": MAX_MODEL_LEN,
        "tokens": expected,
        "token_strs": None,
    }
    sent, headers = upstream.requests[-1], upstream.headers[-1]
    assert sent == {"model": "echo", "messages": MESSAGES}  # the served name; nothing else added
    assert {name.lower(): value for name, value in headers.items()}["x-request-id"].startswith("tok-1-")
    assert _post(client, "/detokenize", {"model": "small", "tokens": counted["tokens"][:4]}) == {
        "prompt": "<use"
    }


def test_a_key_is_needed_and_the_model_must_serve_the_route(gateway: GatewayServer) -> None:
    with pytest.raises(openai.AuthenticationError):
        _post(_client(gateway, "sk-unknown"), "/tokenize", {"model": "small", "prompt": "hi"})
    with pytest.raises(openai.NotFoundError) as info:  # pool "fail" declares no pass-through route
        _post(_client(gateway), "/tokenize", {"model": "fail", "prompt": "hi"})
    assert "does not serve /tokenize" in info.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        _post(_client(gateway), "/tokenize", {"prompt": "hi"})
    assert bad.value.param == "model"
    wrong = httpx.get(gateway.url + "/tokenize", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    unknown = httpx.post(gateway.url + "/pooling", json={"model": "small"}, timeout=10)
    assert unknown.status_code == 404  # not declared by any pool: the gateway's own 404


def test_no_tokens_are_counted(gateway: GatewayServer) -> None:
    client = _client(gateway)
    for _ in range(3):
        _post(client, "/tokenize", {"model": "small", "prompt": "a long prompt " * 50})
    gateway.settle()
    usage = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    acme = usage.json()["tenants"]["acme"]["total"]
    assert acme["requests"] >= 3 and acme["input_tokens"] == 0 and acme["output_tokens"] == 0
