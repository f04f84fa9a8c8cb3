"""``kind: ollama`` through a real gateway, against Ollama's recorded wire (``wire/ollama.json``).

Three fakes play the transcript: the ``ollama`` pool's replica (also serving ``ollama-embed`` and
``ollama-missing``, a model the server does not have) and the ``ollama-pair``. The pair's first
replica is made busy by its ``/api/ps`` answering with nothing loaded (the adapter reads that as a
cold load ahead: one waiting request). Besides the shared scenarios: embeddings (float and base64),
a model the server lacks (404 ``model_not_found``), the health probe on ``/api/version`` and the
exact native requests the gateway sent.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.backends_compat.scenarios import MESSAGES, CompatScenarios, Target, wait_until
from tests.backends_compat.wire_setup import WireSetup, exchange

MODEL = "llama3.2:1b"
STORY = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
TEXTS = ["Why is the sky blue?", "Why is the grass green?"]


def _more_pools(policy: dict[str, Any], setup: WireSetup) -> None:
    for pool, model in (("ollama-embed", "all-minilm"), ("ollama-missing", "llama3.2:missing")):
        replica = {"base_url": setup.single.origin + "/v1", "kind": "ollama", "name": pool, "model": model}
        policy["pools"][pool] = {"replicas": [replica]}
    policy["routing"]["pools"]["ollama"] = {"health": {"probe_interval_s": 0.1}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WireSetup]:
    tmp = tmp_path_factory.mktemp("ollama")
    # busy: nothing loaded in /api/ps, one cold load ahead
    running = WireSetup(
        "ollama",
        MODEL,
        tmp,
        load_page="ps",
        busy_page="ps_nothing_loaded",
        busy_waiting=1.0,
        adjust=_more_pools,
    )
    yield running
    running.stop()
    assert running.unmatched() == []


class TestOllama(CompatScenarios):
    @pytest.fixture
    def target(self, setup: WireSetup) -> Iterator[Target]:
        yield setup.target(
            cut_request={"max_tokens": 200, "messages": STORY},
            rejected={"reasoning_effort": "low"},  # think on a model without thinking: Ollama's 400
            rejected_status=400,
        )
        assert setup.unmatched() == []


def _client(setup: WireSetup) -> openai.OpenAI:
    return openai.OpenAI(base_url=setup.server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _vectors(setup: WireSetup) -> list[list[float]]:
    """The transcript's vectors, as its JSON numbers read."""
    vectors: list[list[float]] = json.loads(exchange(setup.transcript, "embed")["response"]["chunks"][0])[
        "embeddings"
    ]
    return vectors


def _float32(vector: list[float]) -> list[float]:
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in vector]


def test_embeddings_come_back_as_openai_vectors_in_either_encoding(setup: WireSetup) -> None:
    expected = _vectors(setup)
    as_floats = _client(setup).embeddings.create(model="ollama-embed", input=TEXTS, encoding_format="float")
    as_base64 = _client(setup).embeddings.create(model="ollama-embed", input=TEXTS)  # the SDK asks base64
    assert [item.embedding for item in as_floats.data] == expected  # the numbers as Ollama wrote them
    assert [item.embedding for item in as_base64.data] == [_float32(v) for v in expected]  # float32 bytes
    for answer in (as_floats, as_base64):
        assert answer.model == "ollama-embed"
        assert [item.index for item in answer.data] == [0, 1]
        assert answer.usage.prompt_tokens == answer.usage.total_tokens == 16
    sent = setup.single.bodies("/api/embed")[-2:]
    assert sent == [{"model": "all-minilm", "input": TEXTS, "truncate": False}] * 2


def test_a_model_the_server_lacks_is_the_clients_404(setup: WireSetup) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        _client(setup).chat.completions.create(model="ollama-missing", messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["type"] == "not_found_error" and error["code"] == "model_not_found"
    assert error["message"] == "model 'ollama-missing' not found"  # the model asked for, not the server's


def test_the_health_probe_reads_api_version(setup: WireSetup) -> None:
    wait_until(lambda: ("GET", "/api/version", None) in setup.single.received, what="a probe of /api/version")
    state = setup.server.gateway.balancer.replicas("ollama")[0]
    assert state.health_url == setup.single.origin + "/api/version"
    assert state.is_healthy(setup.server.gateway.balancer.clock())


def test_the_native_requests_are_what_ollama_documents(setup: WireSetup) -> None:
    client = _client(setup)
    client.chat.completions.create(model="ollama", messages=MESSAGES, max_tokens=16, temperature=0)  # type: ignore[arg-type]
    client.completions.create(
        model="ollama", prompt="The three primary colours are", max_tokens=16, temperature=0
    )
    chat = setup.single.bodies("/api/chat")[-1]
    generate = setup.single.bodies("/api/generate")[-1]
    assert chat == {
        "model": MODEL,
        "messages": MESSAGES,
        "stream": False,
        "options": {"temperature": 0, "top_p": 1.0, "num_predict": 16},
    }
    assert generate == {
        "model": MODEL,
        "prompt": "The three primary colours are",
        "raw": True,
        "stream": False,
        "options": {"temperature": 0, "top_p": 1.0, "num_predict": 16},
    }


def test_an_error_line_mid_stream_ends_the_clients_stream_with_an_error(setup: WireSetup) -> None:
    stream = _client(setup).chat.completions.create(
        model="ollama",
        messages=[{"role": "user", "content": "Describe the ocean floor in detail."}],
        max_tokens=64,
        temperature=0,
        stream=True,
    )
    texts, finish = [], None
    with pytest.raises(openai.APIError):
        for chunk in stream:
            for choice in chunk.choices:
                texts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
    assert "".join(texts) == "The ocean floor is" and finish is None
