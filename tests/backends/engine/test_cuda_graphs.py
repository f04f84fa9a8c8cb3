"""Decode graphs on the CPU: buckets, padding, the static buffers, and replays through the eager twin
that match the eager forward, at the runner and the engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.cuda_graphs import (
    CudaGraphCapturer,
    DecodeBuffers,
    DecodeGraphLayout,
    EagerGraphCapturer,
    GraphCapturer,
    ViewLayout,
    bucket_for,
    decode_graph_layout,
    graph_batch_sizes,
    graph_config,
    load_rows,
    load_table,
    table_width,
)
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory

CPU = torch.device("cpu")


def test_buckets_double_to_eight_then_step_by_sixteen_and_end_at_max_num_seqs() -> None:
    assert graph_batch_sizes(64) == (1, 2, 4, 8, 16, 32, 48, 64)
    assert graph_batch_sizes(1) == (1,)
    assert graph_batch_sizes(6) == (1, 2, 4, 6)
    assert graph_batch_sizes(40) == (1, 2, 4, 8, 16, 32, 40)
    assert graph_batch_sizes(4096)[-1] == 512  # no graph above nano-vllm's cap


def test_the_smallest_bucket_that_holds_the_batch() -> None:
    sizes = graph_batch_sizes(64)
    assert [bucket_for(n, sizes) for n in (1, 3, 8, 9, 33, 64)] == [1, 4, 8, 16, 48, 64]
    assert bucket_for(65, sizes) is None  # above the largest: eager


def test_table_width_covers_a_full_sequence_or_a_window_and_its_cut_block() -> None:
    assert table_width(1024, 16, None) == 64
    assert table_width(1000, 16, None) == 63
    assert table_width(1024, 16, 20) == 3  # 20 keys span at most 3 blocks of 16
    assert table_width(1024, 16, 32) == 3
    assert table_width(40, 16, 512) == 3  # never wider than the full view


def test_padding_rows_and_tables() -> None:
    dst = torch.full((6,), 99)
    load_rows(dst, torch.tensor([5, 6, 7]), -1)
    assert dst.tolist() == [5, 6, 7, -1, -1, -1]
    table = torch.full((4, 5), 99)
    load_table(table, torch.tensor([[1, 2], [3, 4]]), 0)
    assert table.tolist() == [[1, 2, 0, 0, 0], [3, 4, 0, 0, 0], [0] * 5, [0] * 5]


def _decode_meta(slots: list[int], tables: list[list[int]], lens: list[int]) -> AttentionMetadata:
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        num_decode_tokens=len(slots),
        decode_blocks=torch.tensor(tables),
        decode_lens=torch.tensor(lens, dtype=torch.int32),
    )


def test_the_buffers_start_as_padding_and_load_a_step_padded_to_scratch() -> None:
    layout = decode_graph_layout(4, 64, 16, [(None, 9)])
    assert layout == DecodeGraphLayout((1, 2, 4), 16, (ViewLayout(None, 4, 9),))
    buffers = DecodeBuffers(layout, CPU)
    assert buffers.slot_mapping[0].tolist() == [144] * 4 and buffers.lens[0].tolist() == [1] * 4
    meta = _decode_meta([17, 40], [[1, 1], [2, 3]], [2, 25])
    buffers.load(torch.tensor([11, 12]), torch.tensor([1, 24]), meta)
    assert buffers.input_ids.tolist() == [11, 12, 0, 0]
    assert buffers.positions.tolist() == [1, 24, 0, 0]
    assert buffers.slot_mapping[0].tolist() == [17, 40, 144, 144]  # padding writes to the scratch block
    assert buffers.block_tables[0].tolist() == [[1, 1, 9, 9], [2, 3, 9, 9], [9] * 4, [9] * 4]
    assert buffers.lens[0].tolist() == [2, 25, 1, 1]
    view = buffers.metadata(2)
    assert view.num_decode_tokens == 2 and view.decode_blocks is not None
    assert view.decode_blocks.shape == (2, 4) and view.sliding_view is None
    assert buffers.metadata(2) is not view  # fresh: the decode mask is cached on it


def test_what_the_buffers_refuse_runs_eagerly() -> None:
    buffers = DecodeBuffers(decode_graph_layout(2, 32, 16, [(None, 9)]), CPU)
    assert buffers.fits(_decode_meta([3], [[0]], [4]))
    assert not buffers.fits(_decode_meta([3, 4, 5], [[0], [1], [2]], [4, 5, 6]))  # above the largest bucket
    assert not buffers.fits(_decode_meta([3], [[0, 1, 2]], [40]))  # a table wider than the buffer
    mixed = _decode_meta([3, 7], [[0], [1]], [4, 2])
    mixed.prefills.append(PrefillChunk(1, 2, 0, None))
    mixed.num_decode_tokens = 1
    assert not buffers.fits(mixed)  # a prefill in the step
    two_views = _decode_meta([3], [[0]], [4])
    two_views.sliding_view = _decode_meta([3], [[0]], [4])
    assert not buffers.fits(two_views)  # a layout of one view


def test_a_sliding_view_gets_its_own_buffers_and_scratch_block() -> None:
    layout = decode_graph_layout(2, 256, 16, [(None, 20), (32, 7)])
    assert [v.max_blocks for v in layout.views] == [16, 3]
    buffers = DecodeBuffers(layout, CPU)
    meta = _decode_meta([33], [[2, 5, 6]], [40])
    meta.sliding_view = _decode_meta([3 * 16 + 1], [[1, 3]], [20])
    meta.sliding_view.sliding_window = 32
    assert buffers.fits(meta)
    buffers.load(torch.tensor([4]), torch.tensor([39]), meta)
    assert buffers.slot_mapping[1].tolist() == [49, 7 * 16]
    assert buffers.block_tables[1].tolist() == [[1, 3, 7], [7, 7, 7]]
    view = buffers.metadata(1)
    assert view.sliding_window is None
    assert view.sliding_view is not None and view.sliding_view.sliding_window == 32


def test_graphs_only_on_cuda_unless_a_capturer_is_given_and_never_when_eager() -> None:
    cuda = torch.device("cuda")
    assert graph_config(enforce_eager=False, device=CPU, max_num_seqs=8, max_model_len=64) is None
    on_cuda = graph_config(enforce_eager=False, device=cuda, max_num_seqs=8, max_model_len=64)
    assert on_cuda is not None and isinstance(on_cuda.capturer, CudaGraphCapturer)
    assert graph_config(enforce_eager=True, device=cuda, max_num_seqs=8, max_model_len=64) is None
    twin = EagerGraphCapturer()
    on_cpu = graph_config(enforce_eager=False, device=CPU, max_num_seqs=8, max_model_len=64, capturer=twin)
    assert on_cpu is not None and on_cpu.capturer is twin


def test_the_twin_replays_by_calling_again_into_its_static_output() -> None:
    source = torch.tensor([1.0, 2.0])
    fn: Callable[[], torch.Tensor] = lambda: source * 2  # noqa: E731
    twin = EagerGraphCapturer()
    graph = twin.capture(fn)
    output = graph.output
    source += 1
    graph.replay()
    assert graph.output is output and output.tolist() == [4.0, 6.0]
    assert (twin.num_captures, twin.num_replays) == (1, 1)


PROMPTS = [[5, 6, 7], list(range(10, 40)), [3] * 17, list(range(60, 65))]


@pytest.fixture
def make_graphed(tiny_dirs: dict[str, Path]) -> Iterator[Callable[..., LLMEngine]]:
    """Engines on tiny models whose decode graphs are captured by the eager twin."""
    num_threads = torch.get_num_threads()
    engines: list[LLMEngine] = []

    def make(variant: str = "gqa", capturer: GraphCapturer | None = None, **overrides: Any) -> LLMEngine:
        opts: dict[str, Any] = {"device": "cpu", "kv_cache_bytes": 4 << 20, "num_threads": 1, **overrides}
        config = EngineConfig(model=str(tiny_dirs[variant]), **opts)
        engine = LLMEngine(config, graph_capturer=capturer or EagerGraphCapturer())
        engines.append(engine)
        return engine

    yield make
    torch.set_num_threads(num_threads)
    for engine in engines:
        engine.check_invariants()


@pytest.mark.parametrize(
    "variant", ["gqa", "tied", "mistral_window20", "qwen2_mixed_window8", "gemma3_window8"]
)
def test_engine_with_replayed_graphs_matches_eager(
    make_engine: EngineFactory, make_graphed: Callable[..., LLMEngine], variant: str
) -> None:
    """Greedy outputs and logprobs through padded replays equal the eager engine's; every layout (one
    pool, windowed, mixed views, two KV groups) captures and replays."""
    # sequences finish at different steps, so batches of 4, 3, 2 and 1 pad to buckets 4, 4, 2 and 1
    params = [
        SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, logprobs=0) for n in (24, 9, 15, 4)
    ]
    eager = make_engine(variant, max_num_seqs=6)
    twin = EagerGraphCapturer()
    graphed = make_graphed(variant, twin, max_num_seqs=6)
    assert graphed.runner.decode_graphs is not None and eager.runner.decode_graphs is None
    assert twin.num_captures == len(graph_batch_sizes(6))
    want = eager.generate(PROMPTS, params)
    got = graphed.generate(PROMPTS, params)
    assert twin.num_replays > 0
    for w, g in zip(want, got, strict=True):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids
        assert g.outputs[0].logprobs is not None and w.outputs[0].logprobs is not None
        for (lw, _), (lg, _) in zip(w.outputs[0].logprobs, g.outputs[0].logprobs, strict=True):
            assert lg.logprob == pytest.approx(lw.logprob, abs=1e-4)


def test_enforce_eager_turns_the_injected_graphs_off(make_graphed: Callable[..., LLMEngine]) -> None:
    twin = EagerGraphCapturer()
    engine = make_graphed("gqa", twin, enforce_eager=True)
    assert engine.runner.decode_graphs is None and twin.num_captures == 0


def test_the_scratch_block_is_allocated_past_the_pool(make_graphed: Callable[..., LLMEngine]) -> None:
    engine = make_graphed()
    runner = engine.runner
    assert runner.k_cache.shape[2] == (runner.num_blocks + 1) * runner.block_size
    assert engine.block_manager.num_blocks == runner.num_blocks
