"""KV memory per token of context when a sliding window frees the blocks it has passed: measured on
tiny random models (one whose every layer slides, one that mixes sliding and full layers as Gemma 3
does), and computed for Gemma 3 270M's shapes.

    python bench/kv_window.py                                  # window 256, two sequences to 4096 tokens
    python bench/kv_window.py --context 512 --window 64 --json-out kv.json

The tiny models have random weights and are built in memory through the engine's loader seam: a
Mistral-style one (2 layers, every one sliding) and a Gemma 3 one (6 layers, the sixth full, as Gemma 3
interleaves them); both with 2 KV heads of 16 in fp32, so 256 bytes of K and V a token per layer. Each
sequence generates greedily from a 64-token prompt to ``--context`` tokens, once with the engine freeing
the blocks the window has passed (the mixed model: two KV groups, the sliding layers' pool freeing) and
once with ``free_window_blocks=False`` (one pool keeping every block). The peak counts every block
referenced at once, inside steps too (a prefill chunk holds all its blocks during its step, so a prompt
longer than the window sets the peak when the window is short); with two groups it is each pool's peak.
Bytes per token are the peak's bytes over the tokens of context held (sequences x context).

Gemma 3 270M (18 layers: 15 sliding with window 512 and 3 full; 1 KV head of 256; bf16) is computed from
its shapes, not measured (one sequence to 4,096 tokens takes far longer than this bench should): one
pool holds every layer's K/V of every block; two groups hold the full layers' every block and the
sliding layers' only the blocks their window spans.
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

from backends.engine.block_manager import BlockManager
from backends.engine.config import EngineConfig
from backends.engine.kv_groups import KVGroups
from backends.engine.kv_sizing import kv_bytes_per_token
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import LoadedModel, ModelLoader
from backends.engine.model_config import FULL, SLIDING, ModelConfig
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
    """Hugging Face-named tensors of a Mistral or Gemma 3 decoder, normal(0, 0.1) except the norms (ones;
    Gemma's (1 + w) norms get zeros)."""
    is_gemma = cfg.architecture == "Gemma3ForCausalLM"
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
        norms = ["input_layernorm", "post_attention_layernorm"]
        if is_gemma:
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
            yield f"{layer}.self_attn.q_norm.weight", torch.zeros(cfg.head_dim)
            yield f"{layer}.self_attn.k_norm.weight", torch.zeros(cfg.head_dim)
        for norm in norms:
            yield f"{layer}.{norm}.weight", torch.zeros(h) if is_gemma else torch.ones(h)
    yield "model.norm.weight", torch.zeros(h) if is_gemma else torch.ones(h)
    yield "lm_head.weight", normal(cfg.vocab_size, h)


def tiny_sliding_model(window: int, max_position: int, seed: int = 0) -> ModelLoader:
    """A loader for a tiny random Mistral-style model whose every layer slides with ``window``."""
    return _loader(
        ModelConfig(
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
        ),
        seed,
    )


def tiny_mixed_model(window: int, max_position: int, seed: int = 0) -> ModelLoader:
    """A loader for a tiny random Gemma 3 model: five sliding layers with ``window``, then a full one."""
    return _loader(
        ModelConfig(
            vocab_size=VOCAB_SIZE,
            hidden_size=64,
            intermediate_size=128,
            num_layers=6,
            num_heads=4,
            num_kv_heads=2,
            head_dim=16,
            rms_norm_eps=1e-6,
            rope_theta=1e6,
            rope_local_theta=1e4,
            max_position_embeddings=max_position,
            sliding_window=window,
            layer_types=(SLIDING,) * 5 + (FULL,),
            architecture="Gemma3ForCausalLM",
            hidden_act="gelu_pytorch_tanh",
        ),
        seed,
    )


def _loader(cfg: ModelConfig, seed: int) -> ModelLoader:
    def load(name: str) -> LoadedModel:
        return LoadedModel(cfg, byte_tokenizer(), random_weights(cfg, seed), served_name=name)

    return load


@dataclass(frozen=True)
class Measured:
    """One run: peak blocks in use (each pool's, with two groups), their bytes, and the tokens."""

    kv_blocks: str
    kv_bytes: int
    token_ids: list[list[int]]


def measure(
    args: argparse.Namespace, model: ModelLoader, num_layers: int, *, free_window_blocks: bool
) -> Measured:
    """Greedy runs of ``--num-seqs`` sequences to ``--context`` tokens; the KV held at its peak."""
    layer_block_bytes = 256 * BLOCK_SIZE  # K and V of 2 heads of 16 in fp32, one layer, one block
    seqs_blocks = args.num_seqs * (num_blocks(args.context) + 2)
    config = EngineConfig(
        model=f"tiny-{args.window}",
        device="cpu",
        block_size=BLOCK_SIZE,
        max_num_seqs=args.num_seqs,
        max_model_len=args.context,
        # room to keep everything in one pool: the pool never binds
        kv_cache_bytes=seqs_blocks * num_layers * layer_block_bytes,
        num_threads=args.threads,
        free_window_blocks=free_window_blocks,
    )
    engine = LLMEngine(config, loader=model)
    assert (
        kv_bytes_per_token(engine.model_config, torch.float32) * BLOCK_SIZE == num_layers * layer_block_bytes
    )
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (PROMPT_TOKENS,), generator=g).tolist() for _ in range(args.num_seqs)]
    params = SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True)
    outputs = engine.generate(prompts, params)  # each runs to max_model_len == context
    assert all(len(prompts[0]) + len(o.outputs[0].token_ids) == args.context for o in outputs)
    tokens = [o.outputs[0].token_ids for o in outputs]
    bm = engine.block_manager
    if isinstance(bm, KVGroups):
        full, sliding = bm.full.max_num_used_blocks, bm.sliding.max_num_used_blocks
        num_sliding_layers = sum(engine.model_config.is_sliding(i) for i in range(num_layers))
        layer_blocks = full * (num_layers - num_sliding_layers) + sliding * num_sliding_layers
        return Measured(f"{full} full + {sliding} sliding", layer_blocks * layer_block_bytes, tokens)
    assert isinstance(bm, BlockManager)
    peak = bm.max_num_used_blocks
    return Measured(str(peak), peak * num_layers * layer_block_bytes, tokens)


def run(args: argparse.Namespace) -> list[Row]:
    tokens_held = args.num_seqs * args.context
    rows: list[Row] = []
    models = (
        (f"tiny all-sliding, window {args.window}", tiny_sliding_model(args.window, args.context), 2),
        (f"tiny mixed 5+1, window {args.window}", tiny_mixed_model(args.window, args.context), 6),
    )
    labels = (("keep every block", "free passed blocks"), ("one pool", "two groups"))
    for (name, model, num_layers), (kept_label, freed_label) in zip(models, labels, strict=True):
        kept = measure(args, model, num_layers, free_window_blocks=False)
        freed = measure(args, model, num_layers, free_window_blocks=True)
        if freed.token_ids != kept.token_ids:
            raise SystemExit(f"{name}: freeing changed the generated tokens")
        for label, m in ((kept_label, kept), (freed_label, freed)):
            case = f"{name}, {args.num_seqs} seqs: {label}"
            rows.append(Row(case, "measured", m.kv_blocks, m.kv_bytes / tokens_held))
    gemma, ctx = GEMMA3_270M, args.context
    full_blocks = num_blocks(ctx)
    sliding_blocks = min(full_blocks, window_blocks(gemma.window))
    return [
        *rows,
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
    print(f"({time.perf_counter() - started:.0f} s; greedy tokens identical in both layouts of each model)")
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return rows


if __name__ == "__main__":
    main()
