"""KV memory per token of context when a sliding window frees the blocks it has passed: measured on a
tiny random model whose every layer slides, and computed for Gemma 3 270M's shapes.

    python bench/kv_window.py                                  # window 256, two sequences to 4096 tokens
    python bench/kv_window.py --context 512 --window 64 --json-out kv.json

The tiny model (2 layers, 2 KV heads of 16, fp32: 512 bytes of K and V a token) has random weights and
is built in memory through the engine's loader seam. Each sequence generates greedily from a 64-token
prompt to ``--context`` tokens, once with the engine freeing the blocks the window has passed and once
with ``free_window_blocks=False``; the peak counts every block referenced at once, inside steps too
(a prefill chunk holds all its blocks during its step, so a prompt longer than the window sets the
peak when the window is short).
Bytes per token are the peak's bytes over the tokens of context held (sequences x context).

Gemma 3 270M (18 layers: 15 sliding with window 512 and 3 full; 1 KV head of 256; bf16) has full layers,
so its single pool can free nothing. The two-group figure is what a full-layer pool plus a
sliding-layer pool (vLLM's hybrid allocator) would hold: the full layers every block, the sliding
layers only the blocks their window spans.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import tokenizers
import torch
from tokenizers import decoders, models, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import LoadedModel, ModelLoader
from backends.engine.model_config import ModelConfig
from backends.engine.sampling_params import SamplingParams
from backends.engine.tokenizer import Tokenizer

BLOCK_SIZE = 16
PROMPT_TOKENS = 64
VOCAB_SIZE = 257  # 256 bytes plus an end-of-text token
EOS_ID = 256


@dataclass(frozen=True)
class KvShapes:
    """What sizes a model's KV cache: layers, which of them slide, and one token's K/V in one layer."""

    num_layers: int
    num_sliding_layers: int
    window: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def layer_bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def single_pool_bytes(self, context: int) -> int:
        """One pool, every layer's K/V in each block: a sequence holds every block it filled."""
        return self.num_layers * self.layer_bytes_per_token * num_blocks(context) * BLOCK_SIZE

    def two_group_bytes(self, context: int) -> int:
        """A full-layer pool holding every block, and a sliding-layer pool holding the window's."""
        num_full = self.num_layers - self.num_sliding_layers
        full = num_full * num_blocks(context)
        sliding = self.num_sliding_layers * min(num_blocks(context), window_blocks(self.window))
        return (full + sliding) * BLOCK_SIZE * self.layer_bytes_per_token


GEMMA3_270M = KvShapes(
    num_layers=18, num_sliding_layers=15, window=512, num_kv_heads=1, head_dim=256, dtype_bytes=2
)


@dataclass(frozen=True)
class Row:
    case: str
    how: str
    """"measured" (the engine's peak) or "computed" (from the shapes)."""
    kv_blocks: str
    """Peak blocks in use (measured), or the blocks one sequence holds in each pool (computed)."""
    bytes_per_token: float


def num_blocks(num_tokens: int) -> int:
    return -(-num_tokens // BLOCK_SIZE)


def window_blocks(window: int) -> int:
    """The most blocks one sequence's window spans: from a query's first key to the query itself."""
    return num_blocks(window - 1) + 1


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE with no merges: one token per byte, plus an end-of-text token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = tokenizers.Tokenizer(models.BPE({ch: i for i, ch in enumerate(alphabet)}, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([tokenizers.AddedToken("<|endoftext|>", special=True, normalized=False)])
    return Tokenizer(backend, eos_token_id=EOS_ID)


def random_weights(cfg: ModelConfig, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Hugging Face-named tensors of a Mistral decoder, normal(0, 0.1) except the norms (ones)."""
    gen = torch.Generator().manual_seed(seed)
    h, q, kv, inter = (
        cfg.hidden_size,
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
        cfg.intermediate_size,
    )

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.1

    yield "model.embed_tokens.weight", normal(cfg.vocab_size, h)
    for i in range(cfg.num_layers):
        layer = f"model.layers.{i}"
        for name, shape in (("q_proj", (q, h)), ("k_proj", (kv, h)), ("v_proj", (kv, h)), ("o_proj", (h, q))):
            yield f"{layer}.self_attn.{name}.weight", normal(*shape)
        for name, shape in (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter))):
            yield f"{layer}.mlp.{name}.weight", normal(*shape)
        yield f"{layer}.input_layernorm.weight", torch.ones(h)
        yield f"{layer}.post_attention_layernorm.weight", torch.ones(h)
    yield "model.norm.weight", torch.ones(h)
    yield "lm_head.weight", normal(cfg.vocab_size, h)


def tiny_sliding_model(window: int, max_position: int, seed: int = 0) -> ModelLoader:
    """A loader for a tiny random Mistral-style model whose every layer slides with ``window``."""
    cfg = ModelConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=max_position,
        sliding_window=window,
        architecture="MistralForCausalLM",
    )

    def load(name: str) -> LoadedModel:
        return LoadedModel(cfg, byte_tokenizer(), random_weights(cfg, seed), served_name=name)

    return load


def measure(args: argparse.Namespace, *, free_window_blocks: bool) -> tuple[int, int, list[list[int]]]:
    """Peak blocks in use, bytes of one block, and each sequence's generated tokens."""
    seqs_blocks = args.num_seqs * (num_blocks(args.context) + 2)
    config = EngineConfig(
        model=f"tiny-sliding-{args.window}",
        device="cpu",
        block_size=BLOCK_SIZE,
        max_num_seqs=args.num_seqs,
        max_model_len=args.context,
        kv_cache_bytes=seqs_blocks * 512 * BLOCK_SIZE,  # room to keep everything: the pool never binds
        num_threads=args.threads,
        free_window_blocks=free_window_blocks,
    )
    engine = LLMEngine(config, loader=tiny_sliding_model(args.window, args.context))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (PROMPT_TOKENS,), generator=g).tolist() for _ in range(args.num_seqs)]
    params = SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True)
    outputs = engine.generate(prompts, params)  # each runs to max_model_len == context
    assert all(len(prompts[0]) + len(o.outputs[0].token_ids) == args.context for o in outputs)
    block_bytes = engine.model_config.kv_bytes_per_token(4) * BLOCK_SIZE
    return engine.block_manager.max_num_used_blocks, block_bytes, [o.outputs[0].token_ids for o in outputs]


def run(args: argparse.Namespace) -> list[Row]:
    tokens_held = args.num_seqs * args.context
    kept_peak, block_bytes, kept_tokens = measure(args, free_window_blocks=False)
    freed_peak, _, freed_tokens = measure(args, free_window_blocks=True)
    if freed_tokens != kept_tokens:
        raise SystemExit("freeing changed the generated tokens")
    tiny = f"tiny, window {args.window}, {args.num_seqs} seqs"
    gemma, ctx = GEMMA3_270M, args.context
    full_blocks = num_blocks(ctx)
    sliding_blocks = min(full_blocks, window_blocks(gemma.window))
    return [
        Row(f"{tiny}: keep every block", "measured", str(kept_peak), kept_peak * block_bytes / tokens_held),
        Row(
            f"{tiny}: free passed blocks", "measured", str(freed_peak), freed_peak * block_bytes / tokens_held
        ),
        Row("Gemma 3 270M bf16: one pool", "computed", str(full_blocks), gemma.single_pool_bytes(ctx) / ctx),
        Row(
            "Gemma 3 270M bf16: two groups",
            "computed",
            f"{full_blocks} full + {sliding_blocks} sliding",
            gemma.two_group_bytes(ctx) / ctx,
        ),
    ]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--context", type=int, default=4096, help="tokens each sequence grows to")
    parser.add_argument("--window", type=int, default=256, help="the tiny model's sliding window")
    parser.add_argument("--num-seqs", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (a tiny model gains nothing from more)"
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if not PROMPT_TOKENS < args.context:
        parser.error(f"--context must exceed the {PROMPT_TOKENS}-token prompt")
    started = time.perf_counter()
    rows = run(args)
    width = max(len(r.case) for r in rows)
    print(f"KV memory at {args.context} tokens of context (blocks of {BLOCK_SIZE} tokens)")
    print(f"{'case':<{width}}  {'':8}  {'KV blocks':>22}  {'KV bytes/token':>14}")
    for r in rows:
        print(f"{r.case:<{width}}  {r.how:8}  {r.kv_blocks:>22}  {r.bytes_per_token:>14,.0f}")
    print(f"({time.perf_counter() - started:.0f} s; greedy tokens identical with and without freeing)")
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return rows


if __name__ == "__main__":
    main()
