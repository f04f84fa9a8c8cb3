"""Tier classification latency on CPU: p50 / p99 per classifier for prompts of ~10, 100 and 1k tokens.

    python bench/classify_latency.py [--iterations 2000] [--json] [--model OTHER.bin ...]

Each sample is one ``classify()`` call on a chat request, as the gateway makes it (input view,
featurisation, model). The classifiers take turns call by call, so on a shared machine they all
see the same load and can be compared within a run (``--model`` adds another learned model file).
Token counts are cl100k-style estimates (~4 characters a token) of English prose mixed with some
code. The goal: p99 under 1 ms for prompts up to 1k tokens.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from gateway.tiers import (
    ClassifyInput,
    ExamplesConfig,
    LearnedConfig,
    Rule,
    RulesConfig,
    build_classifier,
)

PROSE = (
    "Our service reads events from a queue, enriches them with customer data and writes the result to "
    "the warehouse. Last week the lag grew to forty minutes during the evening peak. Explain the likely "
    "causes and propose how to fix them, with numbers where you can. "
)
CODE = (
    "```python\ndef enrich(event, cache):\n    customer = cache.get(event['customer_id'])\n"
    "    return {**event, **customer}\n```\n"
)
SIZES = {"10": 10, "100": 100, "1k": 1000}


def make_prompt(num_tokens: int) -> str:
    text = ""
    while len(text) < num_tokens * 4:
        text += PROSE + (CODE if len(text) % 3 == 0 else "")
    return text[: num_tokens * 4]


def classifiers(extra_models: list[str] | None = None) -> dict[str, object]:
    rules = RulesConfig(
        rules=[
            Rule(pool="large", min_prompt_tokens=2000),
            Rule(pool="large", keywords=["prove", "derive", "system design", "step by step", "theorem"]),
            Rule(pool="large", regex=[r"\bdesign (an?|the) .* (system|service|platform)\b"]),
            Rule(pool="medium", regex=[r"```"], name="code"),
            Rule(pool="medium", keywords=["summarize", "summarise", "explain", "write a function"]),
            Rule(pool="small", json_mode=True),
        ],
        fallback_pool="small",
    )
    examples = ExamplesConfig(
        examples={
            "small": ["hi there", "translate this to French", "fix the grammar of this sentence"] * 10,
            "medium": ["summarize this article", "write a python function that parses a csv", "explain DNS"]
            * 10,
            "large": ["prove that sqrt 2 is irrational", "design a global payments system", "derive Bayes"]
            * 10,
        }
    )
    built: dict[str, object] = {
        "rules": build_classifier(rules, pools=None),
        "learned": build_classifier(LearnedConfig(), pools=None),
        "examples (90 examples)": build_classifier(examples, pools=None),
    }
    for path in extra_models or []:
        built[f"learned {Path(path).name}"] = build_classifier(LearnedConfig(path=path), pools=None)
    return built


def measure(named: dict[str, object], request: ClassifyInput, iterations: int) -> dict[str, dict[str, float]]:
    """Per classifier: wall-clock p50/p99, and p99 of the thread's CPU time (which a preempting
    neighbour on a busy machine cannot inflate: when the two p99s differ a lot, the wall figure
    measured the box). Calls take turns across classifiers, so all of them see the same load."""
    calls = {name: c.classify for name, c in named.items()}  # type: ignore[attr-defined]
    for _ in range(min(200, iterations)):
        for classify in calls.values():
            classify(request)
    wall = {name: np.empty(iterations) for name in calls}
    cpu = {name: np.empty(iterations) for name in calls}
    for i in range(iterations):
        for name, classify in calls.items():
            started, started_cpu = time.perf_counter(), time.thread_time()
            classify(request)
            wall[name][i] = time.perf_counter() - started
            cpu[name][i] = time.thread_time() - started_cpu
    return {
        name: {
            "p50_ms": round(float(np.percentile(wall[name], 50) * 1e3), 3),
            "p99_ms": round(float(np.percentile(wall[name], 99) * 1e3), 3),
            "cpu_p99_ms": round(float(np.percentile(cpu[name], 99) * 1e3), 3),
        }
        for name in calls
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="another learned model file to measure in the same run (repeatable), e.g. an older one",
    )
    args = parser.parse_args()
    named = classifiers(args.model)
    by_size = {}
    for label, num_tokens in SIZES.items():
        request = ClassifyInput(
            messages=[
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": make_prompt(num_tokens)},
            ]
        )
        by_size[label] = measure(named, request, args.iterations)
    results: list[dict[str, object]] = [
        {"classifier": name, "tokens": label, **by_size[label][name]} for name in named for label in SIZES
    ]
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), "results": results}))
        return 0
    print(f"{'classifier':<30}{'tokens':>8}{'p50 ms':>10}{'p99 ms':>10}{'CPU p99 ms':>12}")
    for r in results:
        figures = f"{r['p50_ms']:>10.3f}{r['p99_ms']:>10.3f}{r['cpu_p99_ms']:>12.3f}"
        print(f"{r['classifier']!s:<30}{r['tokens']!s:>8}{figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
