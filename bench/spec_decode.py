"""Speculative decoding at batch 1 on a repetitive task: SmolLM2-135M-Instruct rewrites given text.

    python bench/spec_decode.py                                    # plain vs ngram, fp32
    python bench/spec_decode.py --method ngram --method draft      # plus an int8 copy as the draft
    python bench/spec_decode.py --dtype bfloat16 --num-requests 4 --max-tokens 128

Each request asks the model to copy a paragraph of chapter 1 of *Pride and Prejudice* (public domain,
shipped with the tests) with its spelling corrected, greedy, one request at a time, so output mostly
repeats input: the case prompt lookup is for. Every configuration gets a fresh engine, one warm-up
request, then the same requests; decode tok/s counts output tokens over the time after each first
token. The output of every speculative run is checked token for token against the plain run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import SMOLLM2_NAME, load_model
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from tools.engine_quality import TEXT

METHODS = ("ngram", "draft")


def method_options(method: str, model: str) -> dict[str, Any]:
    """ngram: prompt lookup; draft: an int8 copy of the target proposes."""
    if method == "ngram":
        return {"speculative_method": "ngram"}
    return {"speculative_method": "draft", "speculative_model": model, "speculative_quantization": "int8"}


def paragraphs(count: int) -> list[str]:
    """The first ``count`` paragraphs of 200-700 characters."""
    text = TEXT.read_text(encoding="utf-8").split("\n\n")[1:]
    return [p for p in text if 200 <= len(p) <= 700][:count]


@dataclass(frozen=True)
class Row:
    outputs: list[list[int]]
    decode_tok_s: float
    """Median over requests of (output tokens - 1) / (time after the first token)."""
    output_tok_s: float
    """All output tokens over all request time (prefill included)."""
    acceptance: float | None
    mean_accepted: float | None

    def summary(self, plain: Row) -> dict[str, Any]:
        return {
            "decode_tok_s": round(self.decode_tok_s, 1),
            "speedup": round(self.decode_tok_s / plain.decode_tok_s, 2),
            "output_tok_s": round(self.output_tok_s, 1),
            "acceptance": None if self.acceptance is None else round(self.acceptance, 3),
            "mean_accepted": None if self.mean_accepted is None else round(self.mean_accepted, 2),
            "identical": self.outputs == plain.outputs,
        }


def run(config: EngineConfig, prompts: list[list[int]], max_tokens: int) -> Row:
    """Fresh engine, one warm-up request (the last prompt), then the others one at a time."""
    engine = LLMEngine(config)
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    engine.generate([prompts[-1]], params)  # warm-up: kernels, allocator (its prompt is not timed)
    warm = engine.stats()
    outputs: list[list[int]] = []
    decode_rates: list[float] = []
    total_tokens, total_s = 0, 0.0
    for i, prompt in enumerate(prompts[:-1]):
        rid = f"bench-{i}"
        started = time.perf_counter()
        engine.add_request(rid, prompt, params)
        first_s: float | None = None
        done: RequestOutput | None = None
        while done is None:
            for out in engine.step():
                if first_s is None and out.outputs[0].token_ids:
                    first_s = time.perf_counter()
                if out.finished:
                    done = out
        ended = time.perf_counter()
        tokens = done.outputs[0].token_ids
        outputs.append(tokens)
        if first_s is not None and len(tokens) > 1:
            decode_rates.append((len(tokens) - 1) / (ended - first_s))
        total_tokens += len(tokens)
        total_s += ended - started
    stats = engine.stats()
    drafts, proposed, accepted = (
        stats.spec_num_drafts - warm.spec_num_drafts,
        stats.spec_num_draft_tokens - warm.spec_num_draft_tokens,
        stats.spec_num_accepted_tokens - warm.spec_num_accepted_tokens,
    )
    return Row(
        outputs,
        statistics.median(decode_rates),
        total_tokens / total_s,
        accepted / proposed if proposed else None,
        1 + accepted / drafts if drafts else None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=SMOLLM2_NAME, help="the target (and, int8, the draft)")
    parser.add_argument("--method", action="append", choices=METHODS, default=None)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--num-requests", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    methods = args.method or ["ngram"]
    tok = load_model(args.model).tokenizer
    prompts = [
        tok.encode(
            tok.apply_chat_template(
                [{"role": "user", "content": f"Copy this text, correcting any spelling mistakes:\n\n{p}"}],
                add_generation_prompt=True,
            )
        )
        for p in paragraphs(args.num_requests + 1)  # the last one warms up
    ]
    rows = {"plain": run(EngineConfig(model=args.model, dtype=args.dtype), prompts, args.max_tokens)}
    for method in methods:
        config = EngineConfig(
            model=args.model,
            dtype=args.dtype,
            num_speculative_tokens=args.num_speculative_tokens,
            **method_options(method, args.model),
        )
        rows[method] = run(config, prompts, args.max_tokens)
    plain = rows["plain"]
    report = {name: row.summary(plain) for name, row in rows.items()}
    if args.json:
        print(json.dumps(report))
    else:
        head = ("decode tok/s", "x plain", "output tok/s", "accepted", "mean len")
        print(f"{'method':8} {head[0]:>12} {head[1]:>8} {head[2]:>12} {head[3]:>9} {head[4]:>8} same")
        for name, r in report.items():
            acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
            mean = "-" if r["mean_accepted"] is None else f"{r['mean_accepted']:.2f}"
            print(
                f"{name:8} {r['decode_tok_s']:12.1f} {r['speedup']:8.2f} {r['output_tok_s']:12.1f} "
                f"{acc:>9} {mean:>8} {r['identical']}"
            )
    return 0 if all(r["identical"] for r in report.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
