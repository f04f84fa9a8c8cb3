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
from typing import Any

import pytest

from tests.backends_compat.scenarios import CompatScenarios, Target
from tests.backends_compat.wire_setup import WireSetup

MODEL = "ensemble"


def _metrics_urls(policy: dict[str, Any], setup: WireSetup) -> None:
    """Each replica's ``metrics_url``: its fake's ``/metrics`` (a real Triton's is on port 8002)."""
    pools = policy["pools"]
    pools["triton"]["replicas"][0]["metrics_url"] = setup.single.origin + "/metrics"
    for replica, fake in zip(pools["triton-pair"]["replicas"], (setup.busy, setup.idle), strict=True):
        replica["metrics_url"] = fake.origin + "/metrics"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WireSetup]:
    tmp = tmp_path_factory.mktemp("triton")
    # busy: 2 requests pending in Triton + 12 waiting in the engine
    running = WireSetup(
        "triton",
        MODEL,
        tmp,
        load_page="metrics",
        busy_page="metrics-busy",
        busy_waiting=14.0,
        adjust=_metrics_urls,
    )
    yield running
    running.stop()
    assert running.unmatched() == []


class TestTriton(CompatScenarios):
    @pytest.fixture
    def target(self, setup: WireSetup) -> Iterator[Target]:
        yield setup.target(
            cut_request={"max_tokens": 200},
            rejected={"max_tokens": None},
            rejected_status=400,
        )
        assert setup.unmatched() == []

    def test_busy_load_is_read_from_tritons_metrics(self, setup: WireSetup, target: Target) -> None:
        first = setup.server.gateway.balancer.replicas("triton-pair")[0]
        with target.make_busy():
            assert first.num_waiting == 14  # 2 pending in Triton + 12 waiting in the engine
            assert first.num_running == 48
            assert first.kv_cache_usage == pytest.approx(0.94)

    def test_the_health_url_is_tritons_ready_endpoint(self, setup: WireSetup) -> None:
        state = setup.server.gateway.balancer.replicas("triton")[0]
        assert state.health_url == setup.single.origin + "/v2/health/ready"
        with urllib.request.urlopen(state.health_url, timeout=10) as answer:
            assert answer.status == 200

    def test_requests_use_the_ensembles_inputs(self, setup: WireSetup, target: Target) -> None:
        target.client().chat.completions.create(
            model="triton",
            messages=[{"role": "user", "content": "Write one sentence about the sea."}],
            max_tokens=16,
            temperature=0,
        )
        sent = setup.single.bodies(f"/v2/models/{MODEL}/generate")[-1]
        assert sent["text_input"].startswith("<|im_start|>user\n")
        assert sent["max_tokens"] == 16 and sent["top_k"] == 1 and "temperature" not in sent
        assert sent["exclude_input_in_output"] is True and sent["return_num_output_tokens"] is True
