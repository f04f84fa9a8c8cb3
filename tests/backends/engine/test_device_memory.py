"""GPU memory planning with fake readings: vLLM's --gpu-memory-utilization, the activation estimate, and
the KV plan kv_sizing makes from them on a (fake) CUDA device."""

from __future__ import annotations

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.device_memory import DeviceMemory, estimate_activation_bytes, gpu_kv_budget
from backends.engine.kv_sizing import plan_kv_cache, plan_kv_pools
from backends.engine.model_config import ModelConfig

GIB = 1 << 30
CUDA = torch.device("cuda")
SMOLLM2 = ModelConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    tie_word_embeddings=True,
)


def test_the_engine_may_hold_its_share_of_the_total_less_weights_and_activations() -> None:
    idle = DeviceMemory(free_bytes=130 * GIB, total_bytes=140 * GIB, allocated_bytes=8 * GIB)
    assert gpu_kv_budget(idle, 0.9, engine_bytes=8 * GIB, activation_bytes=2 * GIB) == 126 * GIB - 10 * GIB
    assert gpu_kv_budget(idle, 0.5, engine_bytes=8 * GIB, activation_bytes=2 * GIB) == 60 * GIB


def test_memory_another_process_holds_shrinks_the_cache_to_what_is_free() -> None:
    shared = DeviceMemory(free_bytes=20 * GIB, total_bytes=140 * GIB, allocated_bytes=8 * GIB)
    assert gpu_kv_budget(shared, 0.9, engine_bytes=8 * GIB, activation_bytes=2 * GIB) == 18 * GIB
    full = DeviceMemory(free_bytes=1 * GIB, total_bytes=140 * GIB, allocated_bytes=8 * GIB)
    assert gpu_kv_budget(full, 0.9, engine_bytes=8 * GIB, activation_bytes=2 * GIB) == 0


def test_the_activation_estimate_grows_with_the_step_and_the_context() -> None:
    def estimate(tokens: int, seqs: int, length: int) -> int:
        return estimate_activation_bytes(
            SMOLLM2, num_batched_tokens=tokens, max_num_seqs=seqs, max_model_len=length, dtype_bytes=2
        )

    base = estimate(2048, 64, 8192)
    assert estimate(4096, 64, 8192) > base and estimate(2048, 128, 8192) > base
    assert estimate(2048, 64, 16384) > base
    # SmolLM2 at the defaults: a prefill chunk's fp32 scores dominate; about 1.3 GiB
    assert 1.0 * GIB < base < 1.6 * GIB


def test_on_cuda_the_kv_plan_is_what_the_utilization_leaves(caplog: pytest.LogCaptureFixture) -> None:
    readings: list[torch.device] = []

    def read(device: torch.device) -> DeviceMemory:
        readings.append(device)
        return DeviceMemory(free_bytes=100 * GIB, total_bytes=140 * GIB, allocated_bytes=3 * GIB)

    config = EngineConfig(model="x", gpu_memory_utilization=0.5, max_model_len=1024)
    caplog.set_level("INFO", logger="backends.engine.kv_sizing")
    plan = plan_kv_cache(
        SMOLLM2, config, CUDA, torch.bfloat16, 1024, baseline_allocated_bytes=GIB, read_memory=read
    )
    activation = estimate_activation_bytes(
        SMOLLM2, num_batched_tokens=2048, max_num_seqs=64, max_model_len=1024, dtype_bytes=2
    )
    budget = 70 * GIB - 2 * GIB - activation  # the engine's own 2 GiB: allocations since the baseline
    assert readings == [CUDA]
    assert plan.sizes == plan_kv_pools(SMOLLM2, config, budget, 2, None, 1024)
    assert "GPU memory" in caplog.text


def test_an_explicit_budget_reads_no_device() -> None:
    def read(device: torch.device) -> DeviceMemory:
        raise AssertionError("no reading with kv_cache_bytes")

    config = EngineConfig(model="x", kv_cache_bytes=64 << 20)
    plan = plan_kv_cache(SMOLLM2, config, CUDA, torch.bfloat16, 1024, read_memory=read)
    assert plan.sizes == plan_kv_pools(SMOLLM2, config, 64 << 20, 2, None, 1024)


def test_a_full_device_refuses_to_start() -> None:
    def read(device: torch.device) -> DeviceMemory:
        return DeviceMemory(free_bytes=GIB // 2, total_bytes=140 * GIB, allocated_bytes=0)

    with pytest.raises(ValueError, match="holds no block"):
        plan_kv_cache(SMOLLM2, EngineConfig(model="x"), CUDA, torch.bfloat16, 8192, read_memory=read)


def test_the_utilization_must_be_a_share() -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        EngineConfig(model="x", gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        EngineConfig(model="x", gpu_memory_utilization=0.0)
