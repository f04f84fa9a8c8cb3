"""Resident memory of one engine process serving two names on the same weights: shared against copied.

    python bench/model_dedup.py [--model smollm2-135m] [--names 2]

Each variant runs in a fresh process that builds its engines the way ``python -m backends.server``
does and reports its resident set (VmRSS) once they are loaded:
  one     one name                              (the baseline)
  shared  ``--model a=M --model b=M``           (names on one source share one engine: the server)
  copies  one engine per name on the same M     (what the server would cost without de-duplication)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KV_BYTES = 64 << 20


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_variant(variant: str, model: str, names: int) -> dict[str, object]:
    """Build the engines of one variant in this process; the engines and RSS after loading."""
    from backends.server import build_engine, build_models, parse_args

    count = 1 if variant == "one" else names
    argv = [a for i in range(count) for a in ("--model", f"name{i}={model}")]
    args = parse_args([*argv, "--kv-cache-bytes", str(KV_BYTES), "--num-threads", "1"])
    if variant == "copies":
        engines = [build_engine(args, model, count) for _ in range(count)]
    else:
        engines = [spec.factory() for spec in build_models(args) if spec.factory is not None]
    return {"variant": variant, "names": count, "engines": len(engines), "rss_mib": round(rss_mib(), 1)}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--names", type=int, default=2)
    parser.add_argument("--variant", choices=("one", "shared", "copies"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:  # a child: one variant, one JSON line
        print(json.dumps(run_variant(args.variant, args.model, args.names)))
        return {}
    rows = []
    for variant in ("one", "shared", "copies"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--model",
                args.model,
                "--names",
                str(args.names),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"model {args.model}, {args.names} names, KV budget {KV_BYTES >> 20} MiB in all")
    print(f"{'variant':<8} {'names':>5} {'engines':>7} {'RSS MiB':>8}")
    for row in rows:
        print(f"{row['variant']:<8} {row['names']:>5} {row['engines']:>7} {row['rss_mib']:>8}")
    result = {"model": args.model, "rows": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
