"""``kind: tgi`` through a real gateway, against TGI's recorded wire (``wire/tgi.json``).

Three fakes play the transcript: the ``tgi`` pool's replica and the ``tgi-pair``. The pair's first
replica is made busy by its ``/metrics`` page answering with a queue and a nearly full batch
(``metrics_busy``). Besides the shared scenarios: the health probe on ``/health``, the exact native
requests the gateway sent, and pools refusing what TGI does not serve.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.backends_compat.scenarios import MESSAGES, PROMPT, CompatScenarios, Target, wait_until
from tests.backends_compat.wire_setup import WireSetup

MODEL = "HuggingFaceTB/SmolLM2-360M-Instruct"


def _tune(policy: dict[str, Any], setup: WireSetup) -> None:
    policy["routing"]["pools"]["tgi"] = {"health": {"probe_interval_s": 0.1}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WireSetup]:
    tmp = tmp_path_factory.mktemp("tgi")
    running = WireSetup(
        "tgi", MODEL, tmp, load_page="metrics", busy_page="metrics_busy", busy_waiting=9.0, adjust=_tune
    )
    yield running
    running.stop()
    assert running.unmatched() == []


class TestTgi(CompatScenarios):
    @pytest.fixture
    def target(self, setup: WireSetup) -> Iterator[Target]:
        yield setup.target(
            cut_request={"max_tokens": 200},
            rejected={"logprobs": True, "top_logprobs": 10},  # over TGI's --max-top-n-tokens (5): its 422
            rejected_status=422,
        )
        assert setup.unmatched() == []


def _client(setup: WireSetup) -> openai.OpenAI:
    return openai.OpenAI(base_url=setup.server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_validation_error_is_openai_shaped(setup: WireSetup) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        _client(setup).chat.completions.create(
            model="tgi",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=16,
            temperature=0,
            logprobs=True,
            top_logprobs=10,
        )
    assert caught.value.body == {
        "message": "Input validation error: `top_n_tokens` must be >= 0 and <= 5. Given: 10",
        "type": "invalid_request_error",
        "param": None,
        "code": "validation",
    }


def test_the_stop_string_tgi_keeps_is_cut(setup: WireSetup) -> None:
    answer = _client(setup).chat.completions.create(
        model="tgi",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=24,
        temperature=0,
        stop=[" is"],
    )
    assert answer.choices[0].message.content == "The sea"  # TGI sent "The sea is", "stop_sequence"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.id.startswith("chatcmpl-")  # TGI's is ""


def test_the_health_probe_reads_health(setup: WireSetup) -> None:
    wait_until(lambda: ("GET", "/health", None) in setup.single.received, what="a probe of /health")
    state = setup.server.gateway.balancer.replicas("tgi")[0]
    assert state.health_url == setup.single.origin + "/health"
    assert state.is_healthy(setup.server.gateway.balancer.clock())


def test_the_native_requests_are_what_tgi_documents(setup: WireSetup) -> None:
    client = _client(setup)
    client.chat.completions.create(model="tgi", messages=MESSAGES, max_tokens=16, temperature=0, top_p=1)  # type: ignore[arg-type]
    answer = client.completions.create(model="tgi", prompt=PROMPT, max_tokens=16, temperature=0)
    assert (
        answer.choices[0].text
        == " red, yellow and blue. These colours cannot be made by mixing other colours together"
    )
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 16)
    chat = setup.single.bodies("/v1/chat/completions")[-1]
    generate = setup.single.bodies("/generate_stream")[-1]
    assert chat == {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 16,
        "temperature": 0,
    }  # top_p 1: not sent
    assert generate == {
        "inputs": PROMPT,
        "parameters": {
            "max_new_tokens": 16,
            "details": True,
            "return_full_text": False,
            "do_sample": False,
            "adapter_id": MODEL,
        },
    }


def test_what_tgi_does_not_serve_is_refused_before_sending(setup: WireSetup) -> None:
    client = _client(setup)
    sent = len(setup.single.received)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tgi", prompt=PROMPT, max_tokens=16, logprobs=2)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="tgi", input="the sea", encoding_format="float")
    assert isinstance(caught.value.body, dict) and "TEI" in caught.value.body["message"]
    assert [r for r in setup.single.received[sent:] if r[0] == "POST"] == []
