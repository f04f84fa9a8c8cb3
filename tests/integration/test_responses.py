"""The Responses API through a real gateway: the official SDK's ``client.responses`` -> the gateway on
loopback -> the fake upstream's ``/v1/responses`` (``tools/servers/fake_vllm.py``), with the policy
chat gets: keys, token limits, routing (aliases, ``auto``), retries, accounting; never the cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.fake_vllm import RESPONSE_ID, RESPONSE_USAGE
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
ADMIN = new_key()
TEXT = "Hello from the fake upstream."


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    pools: dict[str, Any] = document["pools"]
    pools["big"] = {"replicas": [{"base_url": upstream.base_url, "model": "echo", "name": "big"}]}
    # one replica that fails, one that answers: the first attempt that fails is retried on the other
    pools["mixed"] = {
        "replicas": [
            {"base_url": upstream.base_url, "model": model, "name": f"r{i}"}
            for i, model in enumerate(["fail-500", "echo"])
        ]
    }
    document["retry"] = {"max_attempts": 3, "backoff_s": 0.001}
    document["classifier"] = {
        "kind": "rules",
        "rules": [{"pool": "big", "keywords": ["prove"]}],
        "fallback_pool": "small",
    }
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "k", "limits": {"tokens_per_minute": 5000}},
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    path = write_policy(tmp_path_factory.mktemp("responses") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


@pytest.fixture
def client(gateway: GatewayServer) -> openai.OpenAI:
    return client_for(gateway)


def _ledger(gateway: GatewayServer) -> dict[str, Any]:
    """Tenant acme's totals once every request answered so far has settled."""
    gateway.settle()
    usage = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    acme = usage.json()["tenants"].get("acme")
    totals: dict[str, Any] = acme["total"] if acme else {"requests": 0, "input_tokens": 0, "output_tokens": 0}
    return totals


def client_for(gateway: GatewayServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)


def test_a_plain_response_names_the_asked_model_and_is_accounted(
    client: openai.OpenAI, gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    before = _ledger(gateway)
    raw = client.responses.with_raw_response.create(
        model="gpt-4o-mini", input="Say hello", instructions="Be brief.", max_output_tokens=50
    )
    response = raw.parse()
    assert response.id == RESPONSE_ID and response.output_text == TEXT
    assert response.model == "gpt-4o-mini"  # the alias, not the served name
    assert response.usage is not None and response.usage.input_tokens == RESPONSE_USAGE[0]
    assert raw.headers["x-sortyard-pool"] == "small"
    assert raw.headers["x-ratelimit-limit-tokens"] == "5000"
    sent = upstream.requests[-1]
    assert sent["model"] == "echo" and sent["instructions"] == "Be brief." and "stream_options" not in sent
    after = _ledger(gateway)
    assert after["requests"] == before["requests"] + 1
    assert after["input_tokens"] - before["input_tokens"] == RESPONSE_USAGE[0]
    assert after["output_tokens"] - before["output_tokens"] == RESPONSE_USAGE[1]


def test_a_stream_relays_the_typed_events_and_bills_the_completed_events_usage(
    client: openai.OpenAI, gateway: GatewayServer
) -> None:
    before = _ledger(gateway)
    events = list(client.responses.create(model="small", input="Say hello", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 6
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == TEXT
    completed = events[-1]
    assert completed.type == "response.completed" and completed.response.model == "small"
    after = _ledger(gateway)
    assert after["input_tokens"] - before["input_tokens"] == RESPONSE_USAGE[0]
    assert after["output_tokens"] - before["output_tokens"] == RESPONSE_USAGE[1]


async def test_the_sdks_stream_helper_gets_the_final_response(gateway: GatewayServer) -> None:
    aclient = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0, timeout=10)
    async with aclient.responses.stream(model="small", input="Say hello") as stream:
        texts = [event.delta async for event in stream if event.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(texts) == TEXT and final.output_text == TEXT
    assert final.usage is not None and final.usage.output_tokens == RESPONSE_USAGE[1]
    with client_for(gateway).responses.stream(model="small", input="Say hello") as sync_stream:
        assert sync_stream.get_final_response().output_text == TEXT


def test_keys_and_token_limits_apply(gateway: GatewayServer) -> None:
    with pytest.raises(openai.AuthenticationError):
        client_for(gateway, "sk-unknown").responses.create(model="small", input="hi")
    with pytest.raises(openai.RateLimitError) as info:  # max_output_tokens is reserved: it can never fit
        client_for(gateway).responses.create(model="small", input="hi", max_output_tokens=6000)
    assert "too large" in info.value.message
    with pytest.raises(openai.NotFoundError):
        client_for(gateway).responses.create(model="gpt-5", input="hi")


def test_auto_routes_by_the_input(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(model="auto", input="please prove it")
    assert raw.headers["x-sortyard-pool"] == "big"
    items: Any = [{"role": "user", "content": [{"type": "input_text", "text": "just say hi"}]}]
    raw = client.responses.with_raw_response.create(model="auto", input=items)
    assert raw.headers["x-sortyard-pool"] == "small"


def test_a_failed_attempt_is_retried_before_the_first_byte(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    since = len(upstream.requests)
    assert client.responses.create(model="mixed", input="hi").output_text == TEXT
    events = list(client.responses.create(model="mixed", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    served = [body["model"] for body in upstream.requests[since:]]
    assert served.count("echo") == 2 and served.count("fail-500") >= 1


def test_responses_are_never_cached(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    # chat with temperature 0 is cached by default; a response may be stored upstream (store,
    # previous_response_id), so a second identical request must reach the upstream too
    since = len(upstream.requests)
    for _ in range(2):
        raw = client.responses.with_raw_response.create(model="small", input="same", temperature=0)
        assert "x-sortyard-cache" not in raw.headers
    assert len(upstream.requests) - since == 2


def test_a_stream_cut_upstream_ends_with_the_apis_error_event(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="cut", input="hi", stream=True))
    assert events[-1].type == "error"
    assert events[-1].code == "upstream_protocol_error"
    assert events[-1].sequence_number == events[-2].sequence_number + 1
