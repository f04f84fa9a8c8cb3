"""The README's pool example, run as it is written: one policy mixing every kind, through a real
gateway with the official openai SDK. Each replica's address (and served model and chat template,
where a recorded wire names its own) is swapped for a server of its kind on loopback: llama.cpp's
real server, recorded Ollama, TGI and Triton wires (``wire_fake.py``), and an OpenAI fake for the
vLLM replica (the real vLLM has its own module, ``test_vllm.py``: too heavy to start twice). Every
replica of every pool serves, and ``model: "auto"`` routes across the kinds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tests.backends_compat.scenarios import MESSAGES
from tests.support import llamacpp_server
from tests.support.wire_fake import WireFake, load_transcript
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, write_policy

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
WIRE_MODELS = {"tgi": "HuggingFaceTB/SmolLM2-360M-Instruct", "ollama": "llama3.2:1b", "triton": "ensemble"}
"""The served model each recorded wire was recorded with (its requests name it)."""
TRITON_TEMPLATE = "chatml"
"""The recorded Triton wire's model took ChatML prompts (the README's takes Llama 3's)."""


def readme_pools() -> dict[str, Any]:
    """The README's YAML block with replicas of every kind."""
    for block in re.findall(r"^```yaml\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S):
        document = yaml.safe_load(block)
        kinds = {r.get("kind") for pool in document.get("pools", {}).values() for r in pool["replicas"]}
        if {"llamacpp", "ollama", "tgi", "vllm", "triton"} <= kinds:
            assert isinstance(document, dict)
            return document
    raise AssertionError("README.md has no pool example mixing every kind")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    reason = llamacpp_server.unavailable()
    if reason:
        pytest.skip(reason)
    llama = llamacpp_server.LlamaCppServer().start()
    vllm = FakeUpstream().start()
    fakes = {kind: WireFake(load_transcript(kind)).start() for kind in WIRE_MODELS}
    document = readme_pools()
    for pool in document["pools"].values():
        for replica in pool["replicas"]:
            kind = replica["kind"]
            if kind == "llamacpp":
                replica["base_url"] = llama.origin + "/v1"
            elif kind == "vllm":
                replica["base_url"], replica["model"] = vllm.base_url, "echo"
            else:
                origin = fakes[kind].origin
                replica["base_url"] = origin if kind == "triton" else origin + "/v1"
                replica["model"] = WIRE_MODELS[kind]
                if kind == "triton":
                    replica["chat_template"] = TRITON_TEMPLATE
                if "metrics_url" in replica:
                    replica["metrics_url"] = origin + "/metrics"
    document.update(
        version=1,
        auth={"required": False},
        cache={"response": {"enabled": False}},
        store={"url_env": None},
        retry={"max_attempts": 1},
    )
    document["routing"]["health"] = {"probe_interval_s": 0, "scrape_interval_s": 0.2}
    server = GatewayServer(write_policy(tmp_path_factory.mktemp("readme") / "policy.yaml", document)).start()
    yield server
    server.stop()
    for fake in fakes.values():
        assert fake.unmatched == []
        fake.stop()
    vllm.stop()
    llama.stop()


def _chat(gateway: GatewayServer, model: str) -> Any:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    return client.chat.completions.with_raw_response.create(
        model=model,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=16,
        temperature=0,
    )


def test_every_replica_of_every_pool_serves_in_the_openai_shape(gateway: GatewayServer) -> None:
    balancer = gateway.gateway.balancer
    for pool in ("small", "medium", "large"):
        states = balancer.replicas(pool)
        for _ in range(4 * len(states)):
            if all(state.num_requests for state in states):
                break
            raw = _chat(gateway, pool)
            answer = raw.parse()
            assert raw.headers["x-sortyard-pool"] == pool
            assert answer.model == pool and answer.choices[0].message.content
            assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
        served = {state.replica.kind: state.num_requests for state in states}
        assert all(served.values()), f"{pool}: {served}"


def test_auto_routes_across_the_kinds(gateway: GatewayServer) -> None:
    raw = _chat(gateway, "auto")
    answer = raw.parse()
    assert raw.headers["x-sortyard-pool"] in ("small", "medium", "large")
    assert answer.model == "auto" and answer.choices[0].message.content
