"""Engines over random-weight models, and the two decode measurements: one sequence's tokens per second,
and the output tokens per second of a batch of requests submitted at once (continuous batching).

The workload is bench/engine_throughput.py's: prompt lengths uniform in [32, 512], output lengths in
[16, 256] (seed 0), ids drawn in SmolLM2's vocabulary and spread over a bigger one by a fixed hash,
``ignore_eos`` so every length is exact.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass

import torch

from backends.engine.config import EngineConfig
from backends.engine.cuda_graphs import GraphCapturer
from backends.engine.kv_sizing import kv_bytes_per_token
from backends.engine.llm_engine import DTYPES, LLMEngine
from backends.engine.sampling_params import SamplingParams
from gpu.models import FIRST_TOKEN_ID, MODELS, random_loader

SMOLLM2_VOCAB = 49152
SMOLLM2_FIRST_ID = 17


@dataclass(frozen=True)
class Workload:
    """Requests as token ids and the exact number of tokens each generates."""

    prompts: list[list[int]]
    output_lens: list[int]

    @classmethod
    def build(
        cls,
        num_requests: int,
        vocab_size: int,
        *,
        seed: int = 0,
        prompt_lens: tuple[int, int] = (32, 512),
        output_lens: tuple[int, int] = (16, 256),
    ) -> Workload:
        """The same lengths for every model; ids in SmolLM2's range, spread over ``vocab_size``."""
        rng = random.Random(seed)
        prompts, outs = [], []
        for _ in range(num_requests):
            length = rng.randint(*prompt_lens)
            prompts.append([rng.randrange(SMOLLM2_FIRST_ID, SMOLLM2_VOCAB) for _ in range(length)])
            outs.append(rng.randint(*output_lens))
        span = vocab_size - 1 - FIRST_TOKEN_ID  # never the eos id, the last
        prompts = [[FIRST_TOKEN_ID + (t * 2654435761) % span for t in p] for p in prompts]
        return cls(prompts, outs)

    @property
    def num_output_tokens(self) -> int:
        return sum(self.output_lens)

    def kv_tokens_read(self) -> int:
        """Cached tokens the decode steps read: a request's first token comes from its prefill, each
        later one from a decode over the prompt and the tokens before it."""
        return sum(
            len(p) * (n - 1) + (n - 1) * n // 2 for p, n in zip(self.prompts, self.output_lens, strict=True)
        )


@dataclass(frozen=True)
class EngineSpec:
    """An engine over ``MODELS[model]`` with random weights on ``device``."""

    model: str
    device: str
    dtype: str
    max_num_seqs: int = 64
    max_model_len: int = 1024
    kv_cache_bytes: int | None = None
    """None: ``gpu_memory_utilization`` on CUDA (the default, 0.9), a share of free memory on the CPU."""
    num_threads: int | None = None

    def build(self, *, enforce_eager: bool, capturer: GraphCapturer | None = None) -> LLMEngine:
        device = torch.device(self.device)
        config = EngineConfig(
            model=self.model,
            dtype=self.dtype,
            device=self.device,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            kv_cache_bytes=self.kv_cache_bytes,
            enforce_eager=enforce_eager,
            num_threads=self.num_threads,
        )
        return LLMEngine(config, loader=lambda name: random_loader(name, device), graph_capturer=capturer)

    @property
    def dtype_bytes(self) -> int:
        return torch.finfo(DTYPES[self.dtype]).bits // 8

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(MODELS[self.model], DTYPES[self.dtype])


@dataclass(frozen=True)
class DecodeResult:
    """One sequence decoding alone: tokens per second after its first (the prefill's) token."""

    tok_s: float
    prompt_len: int
    num_tokens: int


@dataclass(frozen=True)
class WorkloadResult:
    output_tok_s: float
    wall_s: float
    num_steps: int
    peak_step_bytes: int | None
    """On CUDA: the most memory a step allocated above the engine's resting allocations."""


def measure_decode(engine: LLMEngine, prompt_len: int, num_tokens: int) -> DecodeResult:
    """Decode ``num_tokens`` tokens after a ``prompt_len``-token prompt; the first step (prefill) untimed."""
    vocab = engine.model_config.vocab_size
    prompt = Workload.build(1, vocab, seed=1, prompt_lens=(prompt_len, prompt_len)).prompts[0]
    params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)
    engine.add_request("decode", prompt, params)
    engine.step()  # the prefill and the first token
    _synchronize(engine)
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    elapsed_s = time.perf_counter() - start
    return DecodeResult((num_tokens - 1) / elapsed_s, prompt_len, num_tokens)


def run_workload(engine: LLMEngine, work: Workload) -> WorkloadResult:
    """Every request at once, stepped to the end."""
    is_cuda = engine.device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize(engine.device)
        torch.cuda.reset_peak_memory_stats(engine.device)
    resting = torch.cuda.memory_allocated(engine.device) if is_cuda else 0
    start = time.perf_counter()
    for i, (prompt, num_out) in enumerate(zip(work.prompts, work.output_lens, strict=True)):
        engine.add_request(
            str(i), prompt, SamplingParams(temperature=0.0, max_tokens=num_out, ignore_eos=True)
        )
    num_steps = 0
    while engine.has_unfinished_requests():
        engine.step()
        num_steps += 1
    wall_s = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(engine.device) - resting if is_cuda else None
    return WorkloadResult(work.num_output_tokens / wall_s, wall_s, num_steps, peak)


def free_device_memory(device: torch.device) -> None:
    """Return the memory of engines no longer referenced before the next one is built."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _synchronize(engine: LLMEngine) -> None:
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
