"""The server's GPU and scheduling flags: --gpu-memory-utilization, --enforce-eager and
--long-prefill-token-threshold reach each engine's config, the utilization split between the engines as
the KV budget is."""

from __future__ import annotations

from typing import Any

import pytest

from backends.engine import async_engine, llm_engine
from backends.engine.config import EngineConfig
from backends.server import build_engine, parse_args


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list[EngineConfig]:
    """The config each engine ``build_engine`` makes is built with (no model is loaded)."""
    built: list[EngineConfig] = []

    class FakeEngine:
        model_name, max_model_len = "m", 128

        def __init__(self, config: EngineConfig, **kwargs: Any) -> None:
            built.append(config)

    monkeypatch.setattr(llm_engine, "LLMEngine", FakeEngine)
    monkeypatch.setattr(async_engine, "AsyncLLMEngine", lambda engine, **kwargs: engine)
    return built


def test_defaults_are_vllms() -> None:
    args = parse_args([])
    assert args.gpu_memory_utilization == 0.9 and args.enforce_eager is False
    assert args.long_prefill_token_threshold == 0  # no cap


def test_the_flags_reach_the_engine_config(configs: list[EngineConfig]) -> None:
    args = parse_args(
        ["--gpu-memory-utilization", "0.6", "--enforce-eager", "--long-prefill-token-threshold", "64"]
    )
    build_engine(args, "smollm2-135m", share=2)
    assert configs[0].long_prefill_token_threshold == 64
    assert configs[0].gpu_memory_utilization == pytest.approx(0.3)  # two engines share the GPU
    assert configs[0].enforce_eager is True


def test_a_utilization_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--gpu-memory-utilization", "1.2"])


def test_the_speculative_flags_reach_the_engine_config(configs: list[EngineConfig]) -> None:
    """docs/engine.md's draft row: a quantized copy of the target as the draft."""
    args = parse_args(
        [
            "--speculative-method",
            "draft",
            "--speculative-model",
            "smollm2-135m",
            "--speculative-quantization",
            "int8",
        ]
    )
    build_engine(args, "smollm2-135m", share=1)
    assert (configs[0].speculative_method, configs[0].speculative_quantization) == ("draft", "int8")
    with pytest.raises(SystemExit):
        parse_args(["--speculative-quantization", "fp4"])
