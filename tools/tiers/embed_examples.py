"""``python -m tools.tiers.embed_examples``: the labelled example vectors of ``kind: embeddings``.

    python -m tools.tiers.embed_examples -o gateway/tiers/data/tier_vectors.npz [--corpus build/tiers.jsonl]

Embeds every prompt of the learned model's training corpus (``tools.tiers.corpus``: the same
sources, labels and near-duplicate removal against the evaluation set; built in-process unless
``--corpus`` names a file it wrote) with all-MiniLM-L6-v2 the way the engine serves it
(``backends.embedder``: mean pooling and L2 norm), cut by
:func:`gateway.tiers.example_vectors.embedding_text` as the gateway cuts requests, and writes the
float16 vectors with their tier labels. Imports torch; the gateway never runs this.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.tiers.config import DEFAULT_TIERS
from gateway.tiers.embeddings import pick_tier
from gateway.tiers.example_vectors import ExampleVectors, embedding_text, write_vectors
from tools.tiers.sources import MissingDataError

__all__ = ["EmbedTexts", "embed_texts", "main", "neighbour_accuracy", "vectors_of"]

EmbedTexts = Callable[[Sequence[str]], npt.NDArray[np.float32]]
"""Texts -> their unit vectors, one row each."""


class _Row(msgspec.Struct):
    prompt: str
    tier: str
    group: str | None = None


def embed_texts(texts: Sequence[str], *, batch_size: int = 64) -> npt.NDArray[np.float32]:
    """Unit vectors of ``texts`` from the engine's MiniLM embedder (callers cut them first)."""
    from backends.embedder import Embedder  # torch: loaded only when something is embedded

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # batches of like lengths pad less
    vectors, _ = Embedder(max_batch_size=batch_size).embed([texts[i] for i in order])
    out = np.empty((len(texts), len(vectors[0]) if vectors else 0), dtype=np.float32)
    out[order] = np.asarray(vectors, dtype=np.float32)
    return out


def neighbour_accuracy(
    examples: ExampleVectors, groups: Sequence[str], k: int, *, cost_quality: float = 0.5
) -> float:
    """Share of examples the classifier's vote and knob route to their own tier from their ``k``
    nearest others, leaving out their whole near-duplicate group (a held-out figure, no retraining)."""
    group_ids = np.unique(np.asarray(groups), return_inverse=True)[1]
    threshold = 1.0 - cost_quality if cost_quality > 0 else float("inf")
    thresholds = [(i, threshold) for i in reversed(range(1, len(examples.tiers)))]
    right = 0
    for start in range(0, len(group_ids), 512):  # 512 rows of similarities at a time
        sims = examples.vectors[start : start + 512] @ examples.vectors.T
        sims[group_ids[start : start + 512, None] == group_ids[None, :]] = -np.inf
        nearest = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        for row, idx in enumerate(nearest):
            weights = np.maximum(sims[row, idx], 0.0)
            votes = np.bincount(examples.labels[idx], weights=weights, minlength=len(examples.tiers))
            probs = votes / votes.sum() if votes.sum() > 0 else np.full(len(votes), 1 / len(votes))
            right += pick_tier(probs, thresholds) == examples.labels[start + row]
    return right / max(1, len(group_ids))


def vectors_of(
    rows: Sequence[tuple[str, str]],
    *,
    tiers: Sequence[str] = DEFAULT_TIERS,
    info: str = "",
    embed: EmbedTexts | None = None,
    model: str = "all-minilm-l6-v2",
) -> ExampleVectors:
    """(prompt, tier) rows -> :class:`ExampleVectors` (rows with another tier are an error);
    ``embed`` defaults to :func:`embed_texts`."""
    index = {t: i for i, t in enumerate(tiers)}
    unknown = sorted({tier for _, tier in rows} - set(index))
    if unknown:
        raise ValueError(f"tiers {unknown} are not in {list(tiers)}")
    return ExampleVectors(
        vectors=(embed or embed_texts)([embedding_text(prompt) for prompt, _ in rows]),
        labels=np.asarray([index[tier] for _, tier in rows], dtype=np.intp),
        tiers=tuple(tiers),
        model=model,
        info=info,
    )


def _read_rows(corpus: Path | None) -> tuple[list[tuple[str, str]], list[str], str]:
    """(prompt, tier) rows, their near-duplicate groups, and where they came from."""
    if corpus is not None:
        data = corpus.read_bytes()
        rows = [msgspec.json.decode(line, type=_Row) for line in data.splitlines() if line.strip()]
        groups = [r.group or f"row{i}" for i, r in enumerate(rows)]
        provenance = f"{corpus.name} sha256 {hashlib.sha256(data).hexdigest()}"
        return [(r.prompt, r.tier) for r in rows], groups, provenance
    from tools.tiers.corpus import build_corpus

    built, _ = build_corpus()
    digest = hashlib.sha256("\n".join(f"{r.tier}\t{r.prompt}" for r in built).encode()).hexdigest()
    return (
        [(r.prompt, r.tier) for r in built],
        [r.group for r in built],
        f"tools.tiers.corpus sha256 {digest}",
    )


def main(argv: list[str] | None = None, *, embed: EmbedTexts | None = None) -> int:
    """Entry point: embed the corpus, write the file, print its make-up."""
    p = argparse.ArgumentParser(
        prog="python -m tools.tiers.embed_examples", description=__doc__.split("\n")[0]
    )
    p.add_argument("-o", "--output", type=Path, required=True, help=".npz to write")
    p.add_argument(
        "--corpus", type=Path, default=None, help="JSONL from tools.tiers.corpus (default: build it)"
    )
    args = p.parse_args(argv)
    try:
        rows, groups, provenance = _read_rows(args.corpus)
    except MissingDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    examples = vectors_of(rows, info=f"python -m tools.tiers.embed_examples; {provenance}", embed=embed)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_vectors(args.output, examples)
    counts = Counter(tier for _, tier in rows)
    print(", ".join(f"{counts[t]} {t}" for t in DEFAULT_TIERS) + f": {len(rows)} prompts, dim {examples.dim}")
    print(f"wrote {args.output} ({args.output.stat().st_size:,} bytes)")
    accuracy = {k: neighbour_accuracy(examples, groups, k) for k in (5, 10, 20) if k < len(rows)}
    print(
        "each example routed by its k nearest others outside its near-duplicate group (cost_quality 0.5): "
        + ", ".join(f"k={k} {a:.3f}" for k, a in accuracy.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
