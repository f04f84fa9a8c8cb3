"""Prompt-cache benchmark: prefix affinity against plain balancing, 4 reference-engine replicas.

8 distinct system prompts of ~1,024 tokens, 200 requests each (shuffled, fixed seed), each with its
own short user turn, go through one gateway to 4 engine replicas whose KV caches hold only ~3 such
prompts each. With affinity the gateway sends each prompt to the replica that already holds its
prefix; without it (least outstanding requests) every replica sees every prompt and its prefix
cache thrashes. Reported: TTFT p50/p99 (first streamed token, max_tokens=1), the engines'
prefix-cache hit rate (tokens), and requests per replica.

    python bench/affinity.py                       # both modes, ~2-4 min on 2 cores
    python bench/affinity.py --requests-per-prompt 50 --json-out affinity.json

The engines run a random-weight Llama (hidden 256, 4 layers) with a byte-level tokenizer, built on
the fly: prefill cost is what matters here, not the words.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
KV_BYTES_PER_TOKEN = 2 * 4 * 2 * 64 * 4  # k+v, layers, kv heads, head dim, fp32


def build_model(path: Path) -> Path:
    """A random Llama (hidden 256, 4 layers, GQA 4/2) with a byte-level tokenizer, in HF format."""
    if (path / "config.json").exists():
        return path
    import tokenizers
    import torch
    from tokenizers import decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = tokenizers.Tokenizer(models.BPE({ch: i for i, ch in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML, "eos_token": "<|endoftext|>", "bos_token": None})
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256 + len(SPECIALS),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=256,
        pad_token_id=256,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta ocean river mountain cloud signal vector kernel tensor cache".split()
    out = []
    for i in range(n):
        text = f"System prompt {i}: you are assistant number {i}. "
        while len(text) < 1024:
            text += rng.choice(words) + " "
        out.append(text[:1024])
    return out


def start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )


def wait_ok(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def engine_counters(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in (
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:e2e_request_latency_seconds_count",
        ):
            if line.startswith(name):
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


async def drive(gateway: str, work: list[tuple[str, str]], concurrency: int) -> list[float]:
    ttfts: list[float] = []
    queue = list(reversed(work))

    async def worker(http: httpx.AsyncClient) -> None:
        while queue:
            system, user = queue.pop()
            body = {
                "model": "tiny",
                "stream": True,
                "max_tokens": 1,
                "temperature": 0,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            }
            started = time.perf_counter()
            async with http.stream("POST", gateway + "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {await response.aread()!r}")
                first = True
                async for line in response.aiter_lines():
                    if first and line.startswith("data: {"):
                        ttfts.append(time.perf_counter() - started)
                        first = False

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return ttfts


def run_mode(
    affinity: bool, model: Path, work: list[tuple[str, str]], args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    ports = [free_port() for _ in range(args.replicas)]
    kv_bytes = int(args.kv_prompts * 1100 * KV_BYTES_PER_TOKEN)
    engines = [
        start(
            [
                sys.executable,
                "-m",
                "backends.server",
                "--model",
                str(model),
                "--port",
                str(p),
                "--served-model-name",
                "tiny",
                "--kv-cache-bytes",
                str(kv_bytes),
                "--max-num-seqs",
                "8",
                "--embedding-model",
                "none",
                "--num-threads",
                "1",
                "--log-level",
                "warning",
            ],
            tmp / f"engine-{p}.log",
        )
        for p in ports
    ]
    gw_port = free_port()
    policy = tmp / f"policy-{affinity}.yaml"
    replicas = ",".join(
        f'{{base_url: "http://127.0.0.1:{p}/v1", model: tiny, send_cache_salt: true}}' for p in ports
    )
    policy.write_text(
        f"pools:\n  tiny:\n    replicas: [{replicas}]\nauth: {{required: false}}\n"
        f"store: {{url_env: null}}\ncache:\n  response: {{enabled: false}}\n"
        f"  affinity: {{enabled: {str(affinity).lower()}}}\ntelemetry: {{access_log: false}}\n"
        "routing: {health: {probe_interval_s: 0}}\n"
    )
    gateway = start(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--policy",
            str(policy),
            "--port",
            str(gw_port),
            "--log-level",
            "warning",
        ],
        tmp / f"gateway-{affinity}.log",
        env={"SORTYARD_CACHE_SALT_SECRET": "bench"},
    )
    try:
        for p, proc in zip(ports, engines, strict=True):
            wait_ok(f"http://127.0.0.1:{p}/ready", proc)
        wait_ok(f"http://127.0.0.1:{gw_port}/healthz", gateway)
        before = [engine_counters(p) for p in ports]
        started = time.perf_counter()
        ttfts = asyncio.run(drive(f"http://127.0.0.1:{gw_port}", work, args.concurrency))
        wall = time.perf_counter() - started
        after = [engine_counters(p) for p in ports]
    finally:
        for proc in [gateway, *engines]:
            proc.terminate()
        for proc in [gateway, *engines]:
            proc.wait(20)

    def delta(name: str) -> list[float]:
        return [a.get(name, 0) - b.get(name, 0) for a, b in zip(after, before, strict=True)]

    queries, hits = sum(delta("vllm:prefix_cache_queries_total")), sum(delta("vllm:prefix_cache_hits_total"))
    served = delta("vllm:e2e_request_latency_seconds_count")
    ttfts.sort()
    return {
        "mode": "affinity" if affinity else "least outstanding (no affinity)",
        "requests": len(ttfts),
        "wall_s": round(wall, 1),
        "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1),
        "ttft_p99_ms": round(1000 * ttfts[int(0.99 * (len(ttfts) - 1))], 1),
        "prefix_hit_rate": round(hits / queries, 3) if queries else 0.0,
        "per_replica": [int(s) for s in served],
        "max_over_mean": round(max(served) / (sum(served) / len(served)), 2) if sum(served) else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--requests-per-prompt", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kv-prompts", type=float, default=3.0, help="KV cache per replica, in prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    model = build_model(REPO / ".cache" / "bench-affinity-model")
    systems = prompts(args.prompts, args.seed)
    rng = random.Random(args.seed)
    work = [
        (s, f"Question {rng.randrange(10**6)}: what next?")
        for s in systems
        for _ in range(args.requests_per_prompt)
    ]
    rng.shuffle(work)
    results = []
    with tempfile.TemporaryDirectory(prefix="sy-affinity-") as tmp:
        for affinity in (False, True):
            print(f"running {'affinity' if affinity else 'no affinity'} ...", file=sys.stderr, flush=True)
            results.append(run_mode(affinity, model, work, args, Path(tmp)))
    print(
        "| mode | requests | TTFT p50 ms | TTFT p99 ms | engines' prefix hit rate | per replica | max/mean |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['requests']} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | "
            f"{100 * r['prefix_hit_rate']:.1f}% | {r['per_replica']} | {r['max_over_mean']} |"
        )
    base, aff = results
    speedup = base["ttft_p50_ms"] / aff["ttft_p50_ms"] if aff["ttft_p50_ms"] else 0.0
    print(
        f"\nTTFT p50 {speedup:.1f}x lower with affinity (target >= 3x); hit rate "
        f"{100 * aff['prefix_hit_rate']:.1f}% (target >= 80%); "
        f"max/mean {aff['max_over_mean']} (target <= 1.5)"
    )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"results": results, "speedup": speedup}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
