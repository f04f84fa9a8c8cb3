"""The engine's CUDA path on a real GPU (skipped without one; ``python bench/gpu/run.py`` runs them on the
lent GPU machine): decode graphs against eager, the quantized GEMMs' CUDA kernels, the fp8 KV cache, and
the memory plan from --gpu-memory-utilization."""

from __future__ import annotations

import pytest
import torch

from backends.engine.cuda_graphs import graph_batch_sizes
from backends.engine.layers.int4 import Int4Weight, quantize_int4
from backends.engine.layers.int8 import Int8Weight
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
PROMPTS = [[5, 6, 7], list(range(10, 40)), [3] * 17, list(range(60, 65))]


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm())


@pytest.mark.parametrize("variant", ["gqa", "mistral_window20", "gemma3_window8"])
def test_decode_graphs_match_eager(make_engine: EngineFactory, variant: str) -> None:
    params = [
        SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, logprobs=0) for n in (24, 9, 15, 4)
    ]
    eager = make_engine(variant, device="cuda", max_num_seqs=6, enforce_eager=True)
    graphed = make_engine(variant, device="cuda", max_num_seqs=6)
    graphs = graphed.runner.decode_graphs
    assert graphs is not None and sorted(graphs.graphs) == list(graph_batch_sizes(6))
    want, got = eager.generate(PROMPTS, params), graphed.generate(PROMPTS, params)
    for w, g in zip(want, got, strict=True):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids
        assert g.outputs[0].logprobs is not None and w.outputs[0].logprobs is not None
        for (lw, _), (lg, _) in zip(w.outputs[0].logprobs, g.outputs[0].logprobs, strict=True):
            assert lg.logprob == pytest.approx(lw.logprob, abs=1e-3)


@pytest.mark.parametrize("num_rows", [1, 64])
def test_int8_on_cuda_matches_its_dequantized_weight(num_rows: int) -> None:
    gen = torch.Generator(device=CUDA).manual_seed(0)
    weight = torch.randn(256, 128, generator=gen, device=CUDA)
    x = torch.randn(num_rows, 128, generator=gen, device=CUDA)
    for layer in (Int8Weight(weight, None), Int8Weight(weight, None, use_kernel=False)):
        got = layer.matmul(x.bfloat16())
        assert got.device.type == "cuda" and got.dtype == torch.bfloat16
        assert _rel_error(got, x @ layer.dequantized().t()) < 2e-2


@pytest.mark.parametrize("num_rows", [1, 64])
def test_int4_on_cuda_takes_tinygemm_and_matches_the_dequantize_path(num_rows: int) -> None:
    gen = torch.Generator(device=CUDA).manual_seed(1)
    weight = torch.randn(256, 128, generator=gen, device=CUDA)
    q, scale, zero = quantize_int4(weight)
    kernel = Int4Weight(q, scale, zero, None)
    fallback = Int4Weight(q, scale, zero, None, path="dequantize")
    if torch.cuda.get_device_capability(CUDA) >= (8, 0):
        assert kernel.path == "cuda"
    x = torch.randn(num_rows, 128, generator=gen, device=CUDA).bfloat16()
    want = x.float() @ fallback.dequantized().t()
    assert _rel_error(fallback.matmul(x), want) < 2e-2
    assert _rel_error(kernel.matmul(x), want) < 2e-2
    assert _rel_error(kernel.dequantized(), fallback.dequantized()) < 1e-2


@pytest.mark.parametrize(
    "options", [{"quantization": "int8"}, {"quantization": "int4"}, {"kv_cache_dtype": "fp8"}], ids=str
)
def test_quantized_engines_run_on_cuda(make_engine: EngineFactory, options: dict[str, str]) -> None:
    engine = make_engine(device="cuda", dtype="bfloat16", **options)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    outputs = engine.generate(PROMPTS, params)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [12] * len(PROMPTS)
    assert all(o.outputs[0].finish_reason == "length" for o in outputs)
    if options.get("kv_cache_dtype") == "fp8":
        assert engine.runner.k_cache.dtype == torch.float8_e4m3fn and engine.runner.k_cache.is_cuda


def test_the_kv_cache_is_sized_from_the_gpu_memory_utilization(make_engine: EngineFactory) -> None:
    engine = make_engine(device="cuda", kv_cache_bytes=None, gpu_memory_utilization=0.05, max_num_seqs=4)
    assert engine.block_manager.num_blocks > 0
    stats = engine.stats()
    assert stats.is_cuda and 0 < stats.gpu_memory_allocated_bytes <= stats.gpu_memory_reserved_bytes
    total = torch.cuda.mem_get_info(CUDA)[1]
    assert stats.gpu_memory_allocated_bytes < 0.05 * total + (256 << 20)  # the share, and graph memory
