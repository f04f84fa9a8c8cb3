"""The GGUF loader's tensors: decoder GEMM weights in Q4_0 / Q4_1 go out as their blocks, rows unpermuted
like the float path's, and everything else as floats."""

from __future__ import annotations

import numpy as np
import torch
from gguf.constants import GGMLQuantizationType as QType
from gguf.quants import quantize

from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.layers.linear import MergedLinear
from backends.engine.loader.gguf import _iter_tensors, unpermute_qk
from backends.engine.loader.gguf_file import GGUFFile, GGUFTensor
from backends.engine.model_config import ModelConfig

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 64, 4, 2, 16
CFG = ModelConfig(
    vocab_size=32,
    hidden_size=HIDDEN,
    intermediate_size=128,
    num_layers=1,
    num_heads=HEADS,
    num_kv_heads=KV_HEADS,
    head_dim=HEAD_DIM,
)
TENSORS = {  # name: (type, rows)
    "blk.0.attn_q.weight": (QType.Q4_1, HEADS * HEAD_DIM),
    "blk.0.attn_k.weight": (QType.Q4_0, KV_HEADS * HEAD_DIM),
    "blk.0.attn_v.weight": (QType.Q4_1, KV_HEADS * HEAD_DIM),
    "blk.0.ffn_down.weight": (QType.Q8_0, HIDDEN),  # not a Q4 block: floats
    "token_embd.weight": (QType.Q4_1, 32),  # not a GEMM: floats
}


def _gguf() -> GGUFFile:
    rng = np.random.default_rng(0)
    tensors = []
    for name, (qtype, rows) in TENSORS.items():
        raw = quantize(rng.standard_normal((rows, HIDDEN)).astype(np.float32), qtype)
        tensors.append(GGUFTensor(name, qtype, (rows, HIDDEN), raw))
    return GGUFFile({}, tensors)


def test_q4_gemm_weights_go_out_as_blocks_unpermuted() -> None:
    gguf = _gguf()
    by_name = {t.name: t for t in gguf.tensors}
    out = dict(_iter_tensors(gguf, CFG))
    q = out["model.layers.0.self_attn.q_proj.weight"]
    k = out["model.layers.0.self_attn.k_proj.weight"]
    assert isinstance(q, QuantizedTensor) and q.qtype == "Q4_1" and q.shape == (HEADS * HEAD_DIM, HIDDEN)
    assert isinstance(k, QuantizedTensor) and k.qtype == "Q4_0"
    # permuting whole rows of blocks is permuting the rows of the weights they hold
    ref_q = unpermute_qk(by_name["blk.0.attn_q.weight"].dequantize(), HEADS)
    ref_k = unpermute_qk(by_name["blk.0.attn_k.weight"].dequantize(), KV_HEADS)
    assert torch.equal(q.dequantize(), torch.from_numpy(ref_q))
    assert torch.equal(k.dequantize(), torch.from_numpy(ref_k))
    assert isinstance(out["model.layers.0.self_attn.v_proj.weight"], QuantizedTensor)
    assert isinstance(out["model.layers.0.mlp.down_proj.weight"], torch.Tensor)
    assert isinstance(out["model.embed_tokens.weight"], torch.Tensor)


def test_merged_qkv_from_blocks_packs_to_the_float_paths_weights() -> None:
    """q|k|v merged from blocks, int4: the float path's weights up to the bf16 rounding of the scales."""
    out = dict(_iter_tensors(_gguf(), CFG))
    sizes = [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM]
    layer = MergedLinear(HIDDEN, sizes)
    names = [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"]
    floats = []
    for shard, name in enumerate(names):
        tensor = out[name]
        assert isinstance(tensor, QuantizedTensor)
        layer.load_shard(shard, "weight", tensor)
        floats.append(tensor.dequantize())
    layer.quantize_int4()
    ref = torch.cat(floats)
    error = (layer.dense_weight() - ref).abs().max()
    assert error <= ref.abs().max() * 2**-6  # bf16 scales: a fraction of one 4-bit step
