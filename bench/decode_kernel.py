"""The CPU decode-attention kernel alone, at SmolLM2's shapes: milliseconds a layer and K/V bytes read a
second, for the instruction-set path this machine builds (AVX-512, AVX2 or the portable loops).

    python bench/decode_kernel.py                      # fp32, 64 sequences of 32-512 tokens
    python bench/decode_kernel.py --dtype bfloat16 --num-seqs 16
    python bench/decode_kernel.py --vs-portable        # also the portable loops, calls alternating

A decode step runs this once per layer for every sequence in the batch; the K/V it reads is the
sequences' whole context (2 x kv heads x head_dim x element size a token), scattered over blocks in a
shuffled order, as a long-running cache leaves them. The figure is the median of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.kernels import cpu_decode


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--num-seqs", type=int, default=64)
    parser.add_argument("--min-len", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=9)
    parser.add_argument("--num-kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument(
        "--vs-portable",
        action="store_true",
        help="also time the portable loops on the same inputs, alternating call by call",
    )
    args = parser.parse_args(argv)
    kernel = cpu_decode.load()
    if kernel is None:
        parser.error("the decode kernel did not build on this machine")
    dtype = getattr(torch, args.dtype)
    rng = random.Random(0)
    lens = [rng.randint(args.min_len, args.max_len) for _ in range(args.num_seqs)]
    bs = args.block_size
    max_blocks = max((n + bs - 1) // bs for n in lens)
    num_blocks = sum((n + bs - 1) // bs for n in lens) + 8
    order = list(range(num_blocks))
    rng.shuffle(order)
    tables = torch.zeros(args.num_seqs, max_blocks, dtype=torch.int64)
    taken = 0
    for s, n in enumerate(lens):
        need = (n + bs - 1) // bs
        tables[s, :need] = torch.tensor(order[taken : taken + need])
        taken += need
    gen = torch.Generator().manual_seed(0)
    shape = (args.num_kv_heads, num_blocks * bs, args.head_dim)
    k = torch.randn(shape, generator=gen).to(dtype)
    v = torch.randn(shape, generator=gen).to(dtype)
    q = torch.randn(args.num_seqs, args.num_heads, args.head_dim, generator=gen).to(dtype)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    scale = args.head_dim**-0.5
    paths = [False, True] if args.vs_portable else [False]
    times: dict[bool, list[float]] = {portable: [] for portable in paths}
    outs = {portable: torch.empty_like(q) for portable in paths}
    try:
        for repeat in range(3 + args.repeats):  # three warm-up calls a path
            for portable in paths:
                kernel.portable = portable
                start = time.perf_counter()
                kernel(q, k, v, tables, lens_t, bs, scale, outs[portable])
                if repeat >= 3:
                    times[portable].append(time.perf_counter() - start)
    finally:
        kernel.portable = False
    ms = {portable: 1000 * statistics.median(t) for portable, t in times.items()}
    kv_bytes = 2 * sum(lens) * args.num_kv_heads * args.head_dim * k.element_size()
    result: dict[str, object] = {
        "isa": kernel.isa,
        "dtype": args.dtype,
        "num_seqs": args.num_seqs,
        "context_tokens": sum(lens),
        "threads": torch.get_num_threads(),
        "ms_per_layer_p50": round(ms[False], 3),
        "kv_gb_s": round(kv_bytes / (ms[False] / 1000) / 1e9, 1),
    }
    if args.vs_portable:
        result["portable_ms_per_layer_p50"] = round(ms[True], 3)
        result["time_vs_portable"] = round(ms[False] / ms[True], 3)
        result["max_abs_diff_vs_portable"] = (outs[False].float() - outs[True].float()).abs().max().item()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
