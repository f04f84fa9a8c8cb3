"""``TritonPagedAttention`` as the model sees it, under Triton's interpreter: a mixed step (decodes,
fresh prompts, chunks with context) against ``TorchPagedAttention`` with the caches each leaves, the
dispatch of ``default_backend``, and a tiny Llama generating through the engine on either backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch

from backends.engine.config import EngineConfig
from backends.engine.kernels import triton as triton_kernels
from backends.engine.kernels.triton.backend import TritonPagedAttention
from backends.engine.layers import attention
from backends.engine.llm_engine import LLMEngine
from backends.engine.models import llama
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.kernels.triton.cases import (
    DEVICE,
    assert_matches,
    build_step,
    needs_triton,
    reference,
)
from tests.backends.engine.tiny import build_tiny_model

pytestmark = needs_triton

MIXED = [(30, 1), (4, 1), (70, 1), (0, 23), (18, 13), (32, 6), (0, 1)]
"""Decodes (one past several partitions of 32), fresh prompts, a later chunk, a prefix hit."""


def small_tiles() -> TritonPagedAttention:
    """Tiles small enough that these shapes walk several of them, and split-K at 32 tokens."""
    return TritonPagedAttention(partition_size=32, decode_block_n=16, block_m=16, block_n=16)


@pytest.mark.parametrize(
    ("dtype", "kv_cache_dtype", "window"),
    [
        (torch.float32, "auto", None),
        (torch.float32, "auto", 20),
        (torch.bfloat16, "auto", None),
        (torch.float32, "int8", None),
        (torch.bfloat16, "fp8", 20),
    ],
    ids=["fp32", "fp32-window", "bf16", "int8", "fp8-bf16-window"],
)
def test_mixed_step_matches_torch(dtype: torch.dtype, kv_cache_dtype: str, window: int | None) -> None:
    step = build_step(MIXED, 6, 2, 32, dtype=dtype, kv_cache_dtype=kv_cache_dtype, window=window, seed=7)
    expected, k_expected, v_expected = reference(step)
    k_cache, v_cache = step.caches()
    out = small_tiles().forward(step.q, step.k, step.v, k_cache, v_cache, step.meta, step.scale)
    assert_matches(out, expected)
    assert torch.equal(k_cache.view(torch.uint8), k_expected.view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), v_expected.view(torch.uint8))


def test_cache_shape_is_torchs() -> None:
    for kv_cache_dtype in ["auto", "int8", "fp8"]:
        args = (100, 16, 2, 64, kv_cache_dtype)
        assert TritonPagedAttention().cache_shape(*args) == attention.TorchPagedAttention().cache_shape(*args)


def test_prefill_launches_are_built_once_per_view() -> None:
    """Every layer of a step shares its chunk tables; the next step's metadata gets its own."""
    backend = small_tiles()
    step = build_step(MIXED, 6, 2, 32, seed=8)
    first = backend._prefill_batches(step.meta, step.q.device)
    assert backend._prefill_batches(step.meta, step.q.device) is first
    assert len(first) == 2  # fresh prompts, chunks with context
    other = build_step(MIXED, 6, 2, 32, seed=9)
    assert backend._prefill_batches(other.meta, other.q.device) is not first


def test_default_backend_picks_triton_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(attention.default_backend("cpu"), attention.TorchPagedAttention)
    assert triton_kernels.is_available()  # the interpreter is on
    assert isinstance(attention.default_backend(torch.device("cuda")), TritonPagedAttention)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not triton_kernels.is_available()
    assert isinstance(attention.default_backend("cuda"), attention.TorchPagedAttention)


class CountingBackend(TritonPagedAttention):
    """The defaults, counting the layer forwards it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.num_forwards = 0

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.num_forwards += 1
        return super().forward(*args, **kwargs)


def generate(path: Path, prompts: list[list[int]], **overrides: Any) -> list[list[int]]:
    """Greedy tokens of ``prompts``: the first alone, then the rest together, which hit its cached blocks."""
    num_threads = torch.get_num_threads()  # the engine sets it process-wide
    try:
        config = EngineConfig(
            model=str(path), device=DEVICE.type, kv_cache_bytes=1 << 20, num_threads=1, **overrides
        )
        engine = LLMEngine(config)
        params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
        first = engine.generate(prompts[:1], params)
        rest = engine.generate(prompts[1:], params)
    finally:
        torch.set_num_threads(num_threads)
    assert rest[0].num_cached_tokens == 32  # a prefix hit: the shared prompt's two full blocks
    return [out.outputs[0].token_ids for out in first + rest]


@pytest.mark.parametrize(
    ("variant", "kv_cache_dtype"),
    [("gqa", "auto"), ("gqa", "int8"), ("mistral_window20", "auto")],
    ids=["gqa", "gqa-int8", "window20"],
)
def test_tiny_model_greedy_tokens_match_torch(
    variant: str, kv_cache_dtype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's own metadata: chunked prefill (12-token steps), a prefix hit, batched decodes."""
    path = build_tiny_model(tmp_path / variant, variant)
    shared = list(range(40, 80))
    prompts = [shared, [*shared, 7, 8, 9], [*shared[:20], 1, 2], [90, 91, 92]]
    options: dict[str, Any] = {"max_num_batched_tokens": 12, "kv_cache_dtype": kv_cache_dtype}
    monkeypatch.setattr(llama, "default_backend", lambda device: attention.TorchPagedAttention())
    expected = generate(path, prompts, **options)
    backend = CountingBackend()
    monkeypatch.setattr(llama, "default_backend", lambda device: backend)
    assert generate(path, prompts, **options) == expected
    assert backend.num_forwards > 0
