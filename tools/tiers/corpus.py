"""The training corpus of the shipped tier model: real prompts, labelled, de-duplicated.

    python -m tools.tiers.corpus -o build/tiers.jsonl
    sortyard router train build/tiers.jsonl -o gateway/tiers/data/router.bin

Reads every training source of :mod:`tools.tiers.sources` from its installed package,
drops exact repeats and every prompt that is a near-duplicate of an evaluation prompt (so the
evaluation never scores a prompt the model was trained on), labels the rest with
:func:`tools.tiers.labels.label`, and writes one ``{"prompt", "tier", "group", "source",
"id", "kind"}`` a line. ``group`` is the near-duplicate group, so ``router train`` keeps
near-duplicates on one side of every split. The file holds upstream text: it is a build product,
never committed (the licences differ per source; see ``sources.py``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import msgspec

from gateway.tiers.config import DEFAULT_TIERS
from tools.tiers.labels import label_with_basis
from tools.tiers.near_duplicates import group_near_duplicates, near_duplicates_of
from tools.tiers.sources import EVAL_SOURCES, TRAIN_SOURCES, MissingDataError, Prompt, read_source

__all__ = ["REQUEST_WEIGHT", "LabelledPrompt", "build_corpus", "corpus_main"]

REQUEST_WEIGHT = 8.0
"""Training weight of a row labelled by its request, relative to one labelled by its source."""


class LabelledPrompt(msgspec.Struct, frozen=True):
    """One training row: the prompt, its tier, its near-duplicate group and where it came from."""

    prompt: str
    tier: str
    group: str
    weight: float
    """Training weight (mean 1): rows labelled by their request weigh :data:`REQUEST_WEIGHT` times more."""
    source: str
    id: str
    kind: str
    basis: str
    """What decided the tier: ``request`` or ``source`` (see labels.py)."""


def build_corpus(
    sources: list[str] | None = None, *, exclude: list[str] | None = None
) -> tuple[list[LabelledPrompt], dict[str, int]]:
    """Labelled rows of the training ``sources`` (default: all) minus near-duplicates of the
    ``exclude`` evaluation sources (default: all; ``[]``: none), and counts of what was dropped."""
    prompts: list[Prompt] = []
    for name in sources or list(TRAIN_SOURCES):
        prompts += read_source(name)
    first: dict[str, Prompt] = {}
    for p in prompts:
        first.setdefault(p.text, p)
    unique = list(first.values())
    eval_names = exclude if exclude is not None else list(EVAL_SOURCES)
    held_out = [p.text for name in eval_names for p in read_source(name)]
    overlap = near_duplicates_of([p.text for p in unique], held_out)
    kept = [p for p, dup in zip(unique, overlap, strict=True) if not dup]
    groups = group_near_duplicates([p.text for p in kept])
    labels = [label_with_basis(p) for p in kept]
    # Rows labelled by what they ask for (grammar fixes, rewording, proofs) are few but carry the
    # label's reason in their own words: they count REQUEST_WEIGHT times.
    raw = [REQUEST_WEIGHT if basis == "request" else 1.0 for _tier, basis in labels]
    scale = len(raw) / sum(raw) if raw else 1.0
    rows = [
        LabelledPrompt(
            prompt=p.text,
            tier=tier,
            group=f"g{g}",
            weight=round(w * scale, 4),
            source=p.source,
            id=p.id,
            kind=p.kind,
            basis=basis,
        )
        for p, g, (tier, basis), w in zip(kept, groups, labels, raw, strict=True)
    ]
    dropped = {
        "exact_repeats": len(prompts) - len(unique),
        "near_duplicates_of_evaluation": sum(overlap),
        "near_duplicate_groups_merged": len(kept) - len(set(groups)),
    }
    return rows, dropped


def corpus_main(argv: list[str]) -> int:
    """Entry point: write the corpus and print its make-up per source and tier."""
    p = argparse.ArgumentParser(prog="python -m tools.tiers.corpus", description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", type=Path, required=True, help="JSONL to write")
    args = p.parse_args(argv)
    try:
        rows, dropped = build_corpus()
    except MissingDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    encoder = msgspec.json.Encoder()
    args.output.write_bytes(b"".join(encoder.encode(r) + b"\n" for r in rows))
    counts = Counter((r.source, r.tier) for r in rows)
    print(f"{'source':<14}" + "".join(f"{t:>8}" for t in DEFAULT_TIERS) + f"{'all':>8}")
    for source in dict.fromkeys(r.source for r in rows):
        per_tier = [counts[(source, t)] for t in DEFAULT_TIERS]
        print(f"{source:<14}" + "".join(f"{n:>8}" for n in per_tier) + f"{sum(per_tier):>8}")
    totals = Counter(r.tier for r in rows)
    print(f"{'all':<14}" + "".join(f"{totals[t]:>8}" for t in DEFAULT_TIERS) + f"{len(rows):>8}")
    print("dropped: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in dropped.items()))
    print(f"wrote {args.output} ({len(rows)} prompts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(corpus_main(sys.argv[1:]))
