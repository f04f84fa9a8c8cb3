"""``kind: triton`` through a real gateway: Triton's generate extension (TensorRT-LLM ensemble), played
from its recorded wire (``wire/triton.json``).

Three fakes play the transcript: the ``triton`` pool's replica and the ``triton-pair``'s two. Each
replica's ``metrics_url`` is its fake's ``/metrics`` (a real Triton serves it on the metrics port,
8002). The first of the pair reports load by serving the transcript's ``metrics-busy`` page while
``make_busy`` is entered. The recorded stream for ``cut_request`` is itself cut off, so ``cut`` has
nothing to do. The ``rejected`` request is a chat without ``max_tokens``, an input the ensemble
requires (Triton answers 400). The response cache is off, so that every request reaches the fakes.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.backends_compat.scenarios import CompatScenarios, Target, compat_policy, wait_until
from tests.support.gateway_server import GatewayServer, write_policy
from tests.support.wire_fake import WireFake, load_transcript

MODEL = "ensemble"


def _metrics_url(fake: WireFake) -> str:
    return fake.origin + "/metrics"


def _response(transcript: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e["response"] for e in transcript["exchanges"] if e["name"] == name)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, list[WireFake]]]:
    transcript = load_transcript("triton")
    fakes = [WireFake(transcript).start() for _ in range(3)]
    single, busy, idle = fakes
    policy = compat_policy("triton", single.origin, (busy.origin, idle.origin), model=MODEL)
    pools = policy["pools"]
    pools["triton"]["replicas"][0]["metrics_url"] = _metrics_url(single)
    for replica, fake in zip(pools["triton-pair"]["replicas"], (busy, idle), strict=True):
        replica["metrics_url"] = _metrics_url(fake)
    # every scenario's request must reach the backend: temperature 0 answers would come from the cache
    policy["cache"] = {"response": {"enabled": False}}
    path = write_policy(Path(tmp_path_factory.mktemp("triton")) / "policy.yaml", policy)
    server = GatewayServer(path).start()
    try:
        yield server, fakes
    finally:
        server.stop()
        for fake in fakes:
            fake.stop()


class TestTriton(CompatScenarios):
    @pytest.fixture
    def target(self, setup: tuple[GatewayServer, list[WireFake]]) -> Iterator[Target]:
        server, fakes = setup
        busy = fakes[1]
        pair = server.gateway.balancer.replicas("triton-pair")

        @contextmanager
        def make_busy() -> Iterator[object]:
            busy.overrides["metrics"] = _response(busy.transcript, "metrics-busy")
            try:
                wait_until(lambda: pair[0].num_waiting > 0, what="the busy load scraped")
                yield None
            finally:
                busy.overrides.pop("metrics", None)
                wait_until(lambda: pair[0].num_waiting == 0, what="the idle load scraped")

        yield Target(
            kind="triton",
            gateway_url=server.url,
            cut=lambda: None,
            cut_request={"max_tokens": 200},
            rejected={"max_tokens": None},
            rejected_status=400,
            make_busy=make_busy,
            served=lambda: (pair[0].num_requests, pair[1].num_requests),
        )
        for fake in fakes:
            assert fake.unmatched == []

    def test_busy_load_is_read_from_tritons_metrics(
        self, setup: tuple[GatewayServer, list[WireFake]], target: Target
    ) -> None:
        server, _ = setup
        first = server.gateway.balancer.replicas("triton-pair")[0]
        with target.make_busy():
            assert first.num_waiting == 14  # 2 pending in Triton + 12 waiting in the engine
            assert first.num_running == 48
            assert first.kv_cache_usage == pytest.approx(0.94)

    def test_the_health_url_is_tritons_ready_endpoint(
        self, setup: tuple[GatewayServer, list[WireFake]]
    ) -> None:
        server, fakes = setup
        state = server.gateway.balancer.replicas("triton")[0]
        assert state.health_url == fakes[0].origin + "/v2/health/ready"
        with urllib.request.urlopen(state.health_url, timeout=10) as answer:
            assert answer.status == 200

    def test_requests_use_the_ensembles_inputs(
        self, setup: tuple[GatewayServer, list[WireFake]], target: Target
    ) -> None:
        _, fakes = setup
        target.client().chat.completions.create(
            model="triton",
            messages=[{"role": "user", "content": "Write one sentence about the sea."}],
            max_tokens=16,
            temperature=0,
        )
        sent = fakes[0].bodies(f"/v2/models/{MODEL}/generate")[-1]
        assert sent["text_input"].startswith("<|im_start|>user\n")
        assert sent["max_tokens"] == 16 and sent["top_k"] == 1 and "temperature" not in sent
        assert sent["exclude_input_in_output"] is True and sent["return_num_output_tokens"] is True
