"""Structured outputs' cost in the reference engine: output tok/s under a JSON schema against free text on
the engine workload, and how long a schema takes to compile (and to find again in the cache).

    python bench/structured_outputs.py                    # SmolLM2, the 64-request engine workload
    python bench/structured_outputs.py --num-requests 8   # a quick smoke run
    python bench/structured_outputs.py --rounds 3         # three pairs of runs, the median ratio

The workload is bench/engine_throughput.py's (the same prompts and output caps, seed 0). The constrained
run gives each request one schema of tools/structured_schemas.py in turn, with ``max_tokens`` its output
cap; a request ends where its JSON is complete or at the cap. The free run then asks each request for
exactly as many tokens as its constrained twin produced (ignore_eos), so both runs compute the same
tokens in the same batches and the ratio is the grammar's cost alone: compiling, filling each step's
bitmask, masking the logits, advancing the matchers. A warm-up computes every prompt first, so each
measured run finds them in the prefix cache alike (the figure is decode's). Every constrained output is
checked to be valid JSON (or, cut at its cap, a valid prefix). Compile times are each schema's first
compile with a fresh compiler; the cached figure is a lookup of a schema compiled before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_throughput import Workload

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import SMOLLM2_NAME
from backends.engine.sampling_params import SamplingParams
from backends.engine.structured_output import StructuredOutput
from backends.engine.structured_output.compiler import GrammarCompiler
from backends.engine.structured_output.matcher import SequenceGrammar
from tools.structured_schemas import SCHEMAS, schema_text


def run(engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]]) -> tuple[list[list[int]], float]:
    """Submit all at once, step to the end; each request's output tokens, and the wall seconds."""
    start = time.perf_counter()
    for i, (prompt, params) in enumerate(requests):
        engine.add_request(str(i), prompt, params)
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0].token_ids
    return [done[str(i)] for i in range(len(requests))], time.perf_counter() - start


def compile_times(engine: LLMEngine) -> dict[str, object]:
    """Each schema's first compile with a fresh compiler (ms), then a cached lookup (µs)."""
    compiler = GrammarCompiler(engine.tokenizer, engine.model_config.vocab_size)
    assert (
        compiler.tokenizer_info.vocab_size > 0
    )  # built once per engine, before the first compile: not timed
    specs = [StructuredOutput(json_schema=schema_text(name)) for name in SCHEMAS]
    first_ms = {}
    for name, spec in zip(SCHEMAS, specs, strict=True):
        started = time.perf_counter()
        compiler.compile(spec)
        first_ms[name] = round((time.perf_counter() - started) * 1e3, 2)
    lookups = []
    for _ in range(100):
        for spec in specs:
            started = time.perf_counter()
            compiler.compile(spec)
            lookups.append(time.perf_counter() - started)
    return {
        "compile_ms": first_ms,
        "compile_ms_p50": round(statistics.median(first_ms.values()), 2),
        "compile_ms_max": max(first_ms.values()),
        "cached_lookup_us_p50": round(statistics.median(lookups) * 1e6, 1),
    }


def is_valid(tokens: list[int], cap: int, engine: LLMEngine, spec: StructuredOutput) -> bool:
    """Valid JSON, or (cut at its cap) a prefix the grammar still accepts."""
    if len(tokens) < cap:
        try:
            json.loads(engine.tokenizer.decode(tokens))
        except ValueError:
            return False
        return True
    grammar = SequenceGrammar(engine.grammar_compiler.compile(spec))
    return all(grammar.accept(t) for t in tokens)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--kv-cache-mib", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=1, help="free/constrained pairs, order alternating")
    args = parser.parse_args(argv)
    engine = LLMEngine(
        EngineConfig(
            model=SMOLLM2_NAME,
            max_num_seqs=args.max_num_seqs,
            kv_cache_bytes=args.kv_cache_mib << 20,
            num_threads=args.threads,
        )
    )
    compiled = compile_times(engine)
    work = Workload.build(args.num_requests, args.seed)
    names = list(SCHEMAS)
    specs = [
        StructuredOutput(json_schema=schema_text(names[i % len(names)])) for i in range(len(work.prompts))
    ]
    constrained = [
        (prompt, SamplingParams(temperature=0, max_tokens=cap, structured=spec))
        for prompt, cap, spec in zip(work.prompts, work.output_lens, specs, strict=True)
    ]
    # warm-up: every prompt computed once, so each measured run finds the same prompts in the prefix cache
    run(engine, [(p, SamplingParams(temperature=0, max_tokens=1)) for p in work.prompts])
    outputs, constrained_s = run(engine, constrained)
    lens = [len(tokens) for tokens in outputs]
    num_valid = sum(
        is_valid(tokens, cap, engine, spec)
        for tokens, cap, spec in zip(outputs, work.output_lens, specs, strict=True)
    )
    free = [
        (prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        for prompt, n in zip(work.prompts, lens, strict=True)
    ]
    free_s = run(engine, free)[1]
    rounds = [(free_s, constrained_s)]
    for i in range(1, args.rounds):  # later rounds alternate which goes first: drift cancels
        first, second = (free, constrained) if i % 2 else (constrained, free)
        a_s, b_s = run(engine, first)[1], run(engine, second)[1]
        rounds.append((a_s, b_s) if i % 2 else (b_s, a_s))
    num_out = sum(lens)
    result: dict[str, object] = {
        "model": SMOLLM2_NAME,
        "num_requests": len(work.prompts),
        "output_tokens": num_out,
        "finished_json": sum(n < cap for n, cap in zip(lens, work.output_lens, strict=True)),
        "valid_or_valid_prefix": num_valid,
        "free_tok_s": [round(num_out / f, 1) for f, _ in rounds],
        "json_schema_tok_s": [round(num_out / c, 1) for _, c in rounds],
        "ratio_median": round(statistics.median(f / c for f, c in rounds), 3),
        **compiled,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
