"""Many clients leaving at once, streamed and plain, in front of the real engine (a tiny random Llama):
afterwards the engine is idle (nothing running or waiting, every KV block free), it generated far less
than was asked, and the gateway holds nothing (no open request, no replica load)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from backends.engine.async_engine import AsyncLLMEngine
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.serving.app import create_app
from tests.backends.engine.tiny import build_tiny_model
from tests.backends.serving.harness import serve, wait_until
from tools.servers.gateway_server import GatewayServer, write_policy

pytestmark = pytest.mark.slow
NUM_STREAMS, NUM_PLAIN, MAX_TOKENS = 12, 12, 3000


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncLLMEngine:
    model = build_tiny_model(tmp_path_factory.mktemp("storm") / "llama", "gqa")
    config = EngineConfig(
        model=str(model),
        device="cpu",
        kv_cache_bytes=64 << 20,
        num_threads=1,
        max_model_len=4096,
        max_num_seqs=32,
    )
    return AsyncLLMEngine(LLMEngine(config), max_waiting=256)


@pytest.fixture(scope="module")
def gateway(engine: AsyncLLMEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with serve(create_app(engine, served_model_name="tiny")) as url:
        document = {
            "version": 1,
            "pools": {"small": {"replicas": [{"base_url": url + "/v1", "model": "tiny"}]}},
            "timeouts": {"first_byte_s": 600, "total_s": 600},  # only the clients end these requests
            "store": {"url_env": None},
            "auth": {"required": False},
        }
        server = GatewayServer(write_policy(tmp_path_factory.mktemp("storm-gw") / "p.yaml", document)).start()
        yield server
        server.stop()


def _engine_idle(engine: AsyncLLMEngine) -> bool:
    stats = engine.engine.stats()
    return (
        stats.num_running == 0 and stats.num_waiting == 0 and stats.num_blocks_free == stats.num_blocks_total
    )


def test_a_storm_of_departing_clients_leaves_the_engine_idle(
    gateway: GatewayServer, engine: AsyncLLMEngine
) -> None:
    stats = engine.engine.stats
    body = {"model": "small", "prompt": "storm", "max_tokens": MAX_TOKENS, "ignore_eos": True}
    before = stats().num_prompt_tokens
    assert httpx.post(gateway.url + "/v1/completions", json={**body, "max_tokens": 1}, timeout=60).is_success
    prompt_len = stats().num_prompt_tokens - before  # the prompt is shorter than a block: never cached
    generated_before, prompts_before = stats().num_generated_tokens, stats().num_prompt_tokens

    def stream_then_leave() -> None:
        with (
            httpx.Client(timeout=120) as http,
            http.stream("POST", gateway.url + "/v1/completions", json={**body, "stream": True}) as response,
        ):
            assert response.status_code == 200
            next(response.iter_bytes())  # the first tokens arrived: leave

    streams = [threading.Thread(target=stream_then_leave) for _ in range(NUM_STREAMS)]
    for thread in streams:
        thread.start()
    raw = json.dumps(body).encode()
    plain = []
    for _ in range(NUM_PLAIN):
        sock = socket.create_connection(("127.0.0.1", gateway.port))
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        plain.append(sock)
    # every request has reached the engine (its prompt was prefilled): then the plain clients leave too
    everyone = (NUM_STREAMS + NUM_PLAIN) * prompt_len
    assert wait_until(lambda: stats().num_prompt_tokens - prompts_before >= everyone, 180), stats()
    for sock in plain:
        sock.close()
    for thread in streams:
        thread.join(120)
    assert wait_until(lambda: _engine_idle(engine), timeout_s=120), stats()
    generated = stats().num_generated_tokens - generated_before
    assert generated < NUM_PLAIN * MAX_TOKENS // 2  # the plain ones alone would have made 36,000
    gateway.settle()
    assert gateway.gateway.inflight.num_open == 0
    assert all(s.outstanding == 0 for s in gateway.gateway.balancer.all_replicas())
