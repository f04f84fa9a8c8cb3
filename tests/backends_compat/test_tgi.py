"""``kind: tgi`` through a real gateway, against TGI's recorded wire (``wire/tgi.json``).

Three fakes play the transcript: the ``tgi`` pool's replica and the ``tgi-pair``. The pair's first
replica is made busy by its ``/metrics`` page answering with a queue and a nearly full batch
(``metrics_busy``). Besides the shared scenarios: the health probe on ``/health``, the exact native
requests the gateway sent, and pools refusing what TGI does not serve.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.backends_compat.scenarios import (
    MESSAGES,
    PROMPT,
    CompatScenarios,
    Target,
    compat_policy,
    wait_until,
)
from tests.support.gateway_server import GatewayServer, write_policy
from tests.support.wire_fake import WireFake, load_transcript

MODEL = "HuggingFaceTB/SmolLM2-360M-Instruct"


def _exchange(transcript: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in transcript["exchanges"] if e["name"] == name)
    return found


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.transcript = load_transcript("tgi")
        self.single = WireFake(self.transcript).start()
        self.busy = WireFake(self.transcript).start()
        self.idle = WireFake(self.transcript).start()
        policy = compat_policy("tgi", self.single.origin, (self.busy.origin, self.idle.origin), model=MODEL)
        policy["routing"]["pools"]["tgi"] = {"health": {"probe_interval_s": 0.1}}
        # every request reaches a replica (a cached answer would skip the pair's choice and the wire)
        policy["cache"] = {"response": {"enabled": False}, "embeddings": {"enabled": False}}
        self.server = GatewayServer(write_policy(tmp / "policy.yaml", policy)).start()

    def fakes(self) -> tuple[WireFake, ...]:
        return self.single, self.busy, self.idle

    def pair(self) -> tuple[Any, Any]:
        states = {s.replica.name: s for s in self.server.gateway.balancer.replicas("tgi-pair")}
        return states["tgi-a"], states["tgi-b"]

    def is_fresh(self, state: Any) -> bool:
        return bool(state.load_fresh_until > self.server.gateway.balancer.clock())

    @contextmanager
    def make_busy(self) -> Iterator[None]:
        self.busy.overrides["metrics"] = _exchange(self.transcript, "metrics_busy")["response"]
        try:
            wait_until(self._scraped(waiting=9.0), what="the busy replica's /metrics scraped")
            yield
        finally:
            self.busy.overrides.pop("metrics", None)
            wait_until(self._scraped(waiting=0.0), what="the busy replica's idle /metrics scraped again")

    def _scraped(self, *, waiting: float) -> Any:
        def condition() -> bool:
            a, b = self.pair()
            return a.num_waiting == waiting and b.num_waiting == 0.0 and self.is_fresh(a) and self.is_fresh(b)

        return condition

    def served(self) -> tuple[int, int]:
        a, b = self.pair()
        return a.num_requests, b.num_requests

    def stop(self) -> None:
        self.server.stop()
        for fake in self.fakes():
            fake.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    running = Setup(tmp_path_factory.mktemp("tgi"))
    yield running
    running.stop()
    assert [u for fake in running.fakes() for u in fake.unmatched] == []


class TestTgi(CompatScenarios):
    @pytest.fixture
    def target(self, setup: Setup) -> Iterator[Target]:
        yield Target(
            kind="tgi",
            gateway_url=setup.server.url,
            cut=lambda: None,  # the recorded stream is itself cut off
            cut_request={"max_tokens": 200},
            rejected={"logprobs": True, "top_logprobs": 10},  # over TGI's --max-top-n-tokens (5): its 422
            rejected_status=422,
            make_busy=setup.make_busy,
            served=setup.served,
        )
        assert [u for fake in setup.fakes() for u in fake.unmatched] == []


def _client(setup: Setup) -> openai.OpenAI:
    return openai.OpenAI(base_url=setup.server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_validation_error_is_openai_shaped(setup: Setup) -> None:
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


def test_the_stop_string_tgi_keeps_is_cut(setup: Setup) -> None:
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


def test_the_health_probe_reads_health(setup: Setup) -> None:
    wait_until(lambda: ("GET", "/health", None) in setup.single.received, what="a probe of /health")
    state = setup.server.gateway.balancer.replicas("tgi")[0]
    assert state.health_url == setup.single.origin + "/health"
    assert state.is_healthy(setup.server.gateway.balancer.clock())


def test_the_native_requests_are_what_tgi_documents(setup: Setup) -> None:
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


def test_what_tgi_does_not_serve_is_refused_before_sending(setup: Setup) -> None:
    client = _client(setup)
    sent = len(setup.single.received)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tgi", prompt=PROMPT, max_tokens=16, logprobs=2)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="tgi", input="the sea", encoding_format="float")
    assert isinstance(caught.value.body, dict) and "TEI" in caught.value.body["message"]
    assert [r for r in setup.single.received[sent:] if r[0] == "POST"] == []
