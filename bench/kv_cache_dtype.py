"""KV-cache quantization (``--kv-cache-dtype``): what it costs in quality and decode-kernel time, and
what it buys in tokens per byte.

    python bench/kv_cache_dtype.py quality    # SmolLM2-135M fp32: perplexity, greedy agreement, blocks
    python bench/kv_cache_dtype.py kernel [--threads 1 --batch 8]  # decode kernel per call, one layer

``quality`` feeds chapter 1 of *Pride and Prejudice* (shipped with the tests) 64 tokens at a time, so
every chunk after the first reads its keys and values back from the cache, and generates 32 greedy
tokens for each of the slow test's six chat prompts; agreement counts tokens before the first
difference from the unquantized cache. ``kernel`` times the native decode kernel on SmolLM2's shapes
(9 query heads, 3 KV heads, head_dim 64) at 128 to 8,192 tokens of context, best of many calls.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.kernels import cpu_decode
from backends.engine.layers import kv_quant
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from tools.engine_quality import PROMPTS, TEXT, chunked_perplexity

DTYPES = ("auto", "int8", "fp8")


def quality() -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object]] = {}
    outputs: dict[str, list[list[int]]] = {}
    for kv in DTYPES:
        engine = LLMEngine(
            EngineConfig(model="smollm2-135m", kv_cache_bytes=128 << 20, device="cpu", kv_cache_dtype=kv)
        )
        tok = engine.tokenizer
        ids = [tok.bos_token_id, *tok.encode(TEXT.read_text(encoding="utf-8"))]
        ppl = chunked_perplexity(engine, [i for i in ids if i is not None])
        prompts = [tok.encode(tok.apply_chat_template(m)) for m in PROMPTS]
        outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))
        outputs[kv] = [o.outputs[0].token_ids for o in outs]
        rows[kv] = {"perplexity": round(ppl, 3), "blocks_in_128_mib": engine.block_manager.num_blocks}
    base = outputs["auto"]
    for kv in DTYPES:
        agreed = sum(common_prefix(a, b) for a, b in zip(base, outputs[kv], strict=True))
        rows[kv]["greedy_agreement"] = f"{agreed}/{sum(len(a) for a in base)}"
        rows[kv]["perplexity_vs_auto"] = (
            f"{(float(rows[kv]['perplexity']) / float(rows['auto']['perplexity']) - 1):+.2%}"  # type: ignore[arg-type]
        )
    return rows


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def kernel(threads: int, batch: int, contexts: list[int]) -> list[dict[str, object]]:
    kern = cpu_decode.load()
    if kern is None:
        raise SystemExit("the native decode kernel did not build here")
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    heads, kv_heads, dim, bs = 9, 3, 64, 16
    rows = []
    for ctx in contexts:
        num_blocks = batch * ctx // bs
        kf, vf = torch.randn(kv_heads, num_blocks * bs, dim), torch.randn(kv_heads, num_blocks * bs, dim)
        blocks = torch.randperm(num_blocks).view(batch, ctx // bs).contiguous()
        lens = torch.full((batch,), ctx, dtype=torch.int32)
        for qd in (torch.float32, torch.bfloat16):
            q = torch.randn(batch, heads, dim).to(qd)
            out = torch.empty_like(q)
            calls: dict[str, Callable[[], object]] = {}
            for name, cache in (("float", qd), ("int8", torch.int8), ("fp8", torch.float8_e4m3fn)):
                if cache == qd:
                    kc, vc = kf.to(qd), vf.to(qd)
                else:
                    kc, vc = kv_quant.quantize(kf, cache), kv_quant.quantize(vf, cache)
                calls[name] = functools.partial(kern, q, kc, vc, blocks, lens, bs, 0.125, out)
            best = dict.fromkeys(calls, float("inf"))
            for _ in range(max(8, 40_000 // ctx)):
                for name, call in calls.items():
                    started = time.perf_counter()
                    call()
                    best[name] = min(best[name], time.perf_counter() - started)
            row: dict[str, object] = {"context": ctx, "query_dtype": str(qd).removeprefix("torch.")}
            for name, seconds in best.items():
                row[f"{name}_us"] = round(seconds * 1e6)
                row[f"{name}_x"] = round(seconds / best["float"], 2)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("quality", "kernel"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--contexts", default="128,512,2048,8192", help="context lengths, comma-separated")
    args = parser.parse_args(argv)
    result = (
        quality()
        if args.what == "quality"
        else kernel(args.threads, args.batch, [int(c) for c in args.contexts.split(",")])
    )
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
