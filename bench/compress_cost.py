"""What response compression adds to a request: CPU per body and bytes saved, per coding.

    python bench/compress_cost.py [--repeat 2000] [--json]

Each sample is one ``Compressor.encode`` call, the one the gateway's send path makes (threshold
check, negotiation from the memo, encoding, headers), on the overhead harness's canned answers
(``short`` ~340 bytes, under the 1 KiB threshold; ``long`` ~2.7 KB) and an embeddings answer (16
vectors of 1,536 floats, ~330 KB, encoded on a thread as the gateway does). CPU is process time
(every thread), the median of ``--rounds`` rounds of ``--repeat`` calls; the codings take turns
round by round, so a noisy neighbour hits them alike. ``off`` is the policy without compression,
where the send path only checks that no compressor is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import sys
import time

from harness.nginx import JSON_BODY, LONG_JSON_BODY

from gateway.compression import Coding, CompressionConfig, Compressor

CODINGS: tuple[Coding, ...] = ("zstd", "br", "gzip")


def embeddings_body(num_vectors: int = 16, num_dims: int = 1536) -> bytes:
    """An OpenAI embeddings answer of float32-like values (fixed seed)."""
    rng = random.Random(0)
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": [round(rng.gauss(0, 0.05), 8) for _ in range(num_dims)],
        }
        for i in range(num_vectors)
    ]
    document = {
        "object": "list",
        "data": data,
        "model": "m",
        "usage": {"prompt_tokens": 64, "total_tokens": 64},
    }
    return json.dumps(document, separators=(",", ":")).encode()


async def _cpu_us(compressor: Compressor | None, body: bytes, coding: str, repeat: int) -> tuple[float, int]:
    """Process-time microseconds per encode, and the encoded size."""
    encoded = body
    started = time.process_time()
    for _ in range(repeat):
        headers: list[tuple[bytes, bytes]] = []
        if compressor is not None:  # what gateway.proxy._send_bytes does
            encoded = await compressor.encode(body, coding, headers)
    return (time.process_time() - started) / repeat * 1e6, len(encoded)


async def measure(repeat: int, num_rounds: int) -> list[dict[str, object]]:
    bodies = {
        "short": JSON_BODY.read_bytes().strip(),
        "long": LONG_JSON_BODY.read_bytes().strip(),
        "embeddings": embeddings_body(),
    }
    compressor = Compressor(CompressionConfig(enabled=True))
    samples: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for _ in range(num_rounds):
        for name, body in bodies.items():
            times = repeat if len(body) < 64 * 1024 else max(1, repeat // 100)
            for coding in ("off", *CODINGS):
                us, size = await _cpu_us(None if coding == "off" else compressor, body, coding, times)
                samples.setdefault((name, coding), []).append(us)
                sizes[(name, coding)] = size
    return [
        {
            "body": name,
            "bytes": len(bodies[name]),
            "coding": coding,
            "cpu_us": statistics.median(samples[(name, coding)]),
            "encoded_bytes": sizes[(name, coding)],
        }
        for name, coding in samples
    ]


def markdown(results: list[dict[str, object]]) -> str:
    lines = [
        "| body | bytes | coding | CPU us/response | sent bytes | of the body |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        size, sent = int(str(r["bytes"])), int(str(r["encoded_bytes"]))
        lines.append(
            f"| {r['body']} | {size:,} | {r['coding']} | {float(str(r['cpu_us'])):.1f} | {sent:,} | "
            f"{sent / size:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=2000, help="encodes per sample of a small body")
    parser.add_argument("--rounds", type=int, default=5, help="samples per body and coding (median)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.repeat, args.rounds))
    if args.json:
        print(json.dumps({"python": platform.python_version(), "results": results}, indent=2))
    else:
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
