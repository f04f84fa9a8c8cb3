"""End to end: an engine on a tiny random Llama publishes its cached blocks; a SUB socket sees them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq

from backends.engine.config import EngineConfig
from backends.engine.kv_events.config import KVEventsConfig
from backends.engine.kv_events.events import BlockStored, KVEventBatch, decode_batch
from backends.engine.kv_events.publisher import ZmqEventPublisher
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.tiny import build_tiny_model

BLOCK_SIZE = 8
DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("kv-events") / "gqa", "gqa")


@pytest.fixture
def engine(tiny_llama: Path) -> Iterator[LLMEngine]:
    num_threads = torch.get_num_threads()  # the engine sets it process-wide: put it back afterwards
    kv_events = KVEventsConfig(True, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*")
    config = EngineConfig(
        model=str(tiny_llama),
        device="cpu",
        kv_cache_bytes=1 << 20,
        num_threads=1,
        block_size=BLOCK_SIZE,
        kv_events=kv_events,
    )
    eng = LLMEngine(config)
    yield eng
    eng.close()
    torch.set_num_threads(num_threads)


def replay_all(ctx: zmq.Context[Any], endpoint: str) -> list[KVEventBatch]:
    """Every batch the publisher still buffers, through its replay socket (what a late subscriber does)."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart((b"", (0).to_bytes(8, "big")))
    batches: list[KVEventBatch] = []
    try:
        while True:
            assert dealer.poll(int(DEADLINE_S * 1000)), "the replay did not answer"
            _, seq_bytes, payload = dealer.recv_multipart()
            if int.from_bytes(seq_bytes, "big", signed=True) == -1:
                return batches
            batches.append(decode_batch(payload))
    finally:
        dealer.close(linger=0)


def stored(batches: list[KVEventBatch]) -> list[BlockStored]:
    return [e for b in batches for e in b.events if isinstance(e, BlockStored)]


def test_the_engine_publishes_its_prompts_full_blocks(engine: LLMEngine) -> None:
    pub = engine.kv_events
    assert isinstance(pub, ZmqEventPublisher) and pub.replay_endpoint is not None
    ctx: zmq.Context[Any] = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(pub.endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        prompt = [(7 * i + 3) % 200 + 10 for i in range(3 * BLOCK_SIZE + 5)]  # 3 full blocks and 5 tokens
        params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
        engine.generate([prompt], params)
        # the SUB may have joined after the first batch went out: the replay has them all
        first = stored(replay_all(ctx, pub.replay_endpoint))
        assert [t for e in first for t in e.token_ids] == prompt[: 3 * BLOCK_SIZE]
        assert first[0].parent_block_hash is None and first[0].block_size == BLOCK_SIZE
        assert sum(len(e.block_hashes) for e in first) == 3
        seen = pub.num_published_batches
        # a second prompt sharing two blocks: only its own blocks are new, announced on the PUB socket
        other = [*prompt[: 2 * BLOCK_SIZE], *range(220, 220 + BLOCK_SIZE + 1)]
        engine.generate([other], params)
        deadline = time.monotonic() + DEADLINE_S
        live: list[BlockStored] = []
        while not live:
            assert time.monotonic() < deadline, "no stored event on the PUB socket"
            if sub.poll(100):
                _, seq_bytes, payload = sub.recv_multipart()
                if int.from_bytes(seq_bytes, "big") >= seen:
                    live = stored([decode_batch(payload)])
        (event,) = live
        assert event.token_ids == other[2 * BLOCK_SIZE : 3 * BLOCK_SIZE]
        assert event.parent_block_hash == [h for e in first for h in e.block_hashes][1]
    finally:
        sub.close(linger=0)
        ctx.destroy(linger=0)
    engine.close()
    assert engine.kv_events is pub and not pub._thread.is_alive()
