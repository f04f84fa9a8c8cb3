"""What a client sees through the gateway against what it sees from vLLM directly: the official SDK
against the gateway on loopback and against the fake upstream itself, whose ``vllm-stream`` model sends
chat streams as vLLM does (``system_fingerprint`` moved to the usage chunk when usage is on). Also the
ids each upstream attempt gets, and what a stream the client cut off is billed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.keys.hashing import hash_key, new_key
from gateway.tokens import TokenCounter
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

ADMIN = new_key()
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Write a long story about a cat"},
]
TEMPLATE = {"per_message": 5, "per_request": 30}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    document["pools"]["vllm-stream"] = {"replicas": [{"base_url": upstream.base_url, "model": "vllm-stream"}]}
    document["pools"]["slow"]["template_tokens"] = TEMPLATE
    document["keys"] = [{"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True}]
    path = write_policy(tmp_path_factory.mktemp("vllm") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


def _chunks(base_url: str, **options: Any) -> list[dict[str, Any]]:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=10)
    stream = client.chat.completions.create(
        model="vllm-stream",
        messages=MESSAGES,
        stream=True,
        extra_body={"stream_options": options} if options else None,
    )
    return [chunk.model_dump() for chunk in stream]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"include_usage": True},
        {"continuous_usage_stats": True},
        {"include_usage": True, "continuous_usage_stats": True},
    ],
    ids=["plain", "usage", "continuous-only", "usage-continuous"],
)
def test_a_stream_through_the_gateway_is_the_stream_vllm_sends(
    gateway: GatewayServer, upstream: FakeUpstream, options: dict[str, Any]
) -> None:
    direct = _chunks(upstream.base_url, **options)
    through = _chunks(gateway.url + "/v1", **options)
    assert through == direct
    fingerprints = [chunk["system_fingerprint"] for chunk in through if chunk["system_fingerprint"]]
    assert fingerprints == ["fp_fake"]  # on the finish chunk, or on the usage chunk the client asked for
    assert upstream.requests[-1]["stream_options"]["include_usage"] is True  # the gateway's accounting


def test_each_upstream_attempt_gets_its_own_id_and_the_client_keeps_its_own(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
    since = len(upstream.headers)
    for stream in (False, True):
        raw = client.chat.completions.with_raw_response.create(
            model="small", messages=MESSAGES, stream=stream, extra_headers={"x-request-id": "client-7"}
        )
        assert raw.headers["x-request-id"] == "client-7"  # the client's id names its request here
        raw.parse()
    sent = [
        {k.lower(): v for k, v in headers.items()}["x-request-id"] for headers in upstream.headers[since:]
    ]
    assert len(sent) == len(set(sent)) == 2 and all(value.startswith("client-7-") for value in sent)


def test_a_stream_the_client_cut_is_billed_its_prompt_with_the_pools_template(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
    stream = client.chat.completions.create(model="slow", messages=MESSAGES, stream=True)
    read = [next(stream) for _ in range(3)]
    stream.close()  # the client leaves; the upstream never reports usage
    gateway.settle()  # the cut request has finished and settled
    usage = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    slow = usage.json()["tenants"]["anonymous"]["pools"]["slow"]
    counter = TokenCounter.for_model("slow", default_encoding="cl100k_base")
    text = sum(counter.count_text(m["role"]) + counter.count_text(str(m["content"])) for m in MESSAGES)
    assert slow["input_tokens"] == text + 2 * TEMPLATE["per_message"] + TEMPLATE["per_request"]
    assert slow["output_tokens"] >= len(read)
