"""bf16 against fp32 on SmolLM2-135M: perplexity and greedy agreement, with the CPU kernels as served.

    python bench/bf16_quality.py

Perplexity: chapter 1 of *Pride and Prejudice* (shipped with the tests), fed 64 tokens at a time so
every chunk after the first reads its keys and values back through the cache. Greedy agreement: 32
tokens for each of the slow tests' six chat prompts, counted up to each answer's first difference
from fp32's, and the number of answers identical in full.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kv_cache_dtype import common_prefix

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from tools.engine_quality import PROMPTS, TEXT, chunked_perplexity

MAX_TOKENS = 32


def main() -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object]] = {}
    answers: dict[str, list[list[int]]] = {}
    perplexity: dict[str, float] = {}
    for dtype in ("float32", "bfloat16"):
        engine = LLMEngine(EngineConfig(model="smollm2-135m", dtype=dtype, kv_cache_bytes=128 << 20))
        tok = engine.tokenizer
        ids = [tok.bos_token_id, *tok.encode(TEXT.read_text(encoding="utf-8"))]
        ppl = chunked_perplexity(engine, [i for i in ids if i is not None])
        prompts = [tok.encode(tok.apply_chat_template(m)) for m in PROMPTS]
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
        answers[dtype] = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
        perplexity[dtype] = ppl
        rows[dtype] = {"perplexity": round(ppl, 3)}
    base = answers["float32"]
    for dtype, row in rows.items():
        pairs = list(zip(base, answers[dtype], strict=True))
        row["greedy_agreement"] = f"{sum(common_prefix(a, b) for a, b in pairs)}/{sum(map(len, base))}"
        row["identical_answers"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
        row["perplexity_vs_fp32"] = f"{perplexity[dtype] / perplexity['float32'] - 1:+.2%}"
    print(json.dumps(rows))
    return rows


if __name__ == "__main__":
    main()
