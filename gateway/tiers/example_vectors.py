"""Labelled example vectors for ``kind: embeddings``: the file format and the text that gets embedded.

The file is a numpy ``.npz`` read with ``allow_pickle=False`` (loading can fail, never run code)::

    vectors  float16 (examples x dim)   unit vectors of the example prompts (all-MiniLM-L6-v2: dim 384)
    labels   uint8   (examples,)        index into ``tiers``
    tiers    str     (tiers,)           tier labels from the cheapest to the largest
    model    str     ()                 the embedding model the vectors came from
    info     str     ()                 provenance: the command, the corpus and its sha256

``tools/tiers/embed_examples.py`` writes it; the gateway only reads it. Both sides embed
:func:`embedding_text` of a prompt, so the examples and the requests are cut the same way.
"""

from __future__ import annotations

import importlib.resources
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.tiers.classifier import ClassifierLoadError

__all__ = [
    "HEAD_CHARS",
    "TAIL_CHARS",
    "ExampleVectors",
    "default_vectors_path",
    "embedding_text",
    "read_vectors",
    "write_vectors",
]

HEAD_CHARS = 700
TAIL_CHARS = 300
"""MiniLM reads 256 tokens (about 1,000 characters) and drops the rest: a long prompt is cut to its
head and tail, so an instruction at its end ("... Summarise the text above.") is still seen."""


def embedding_text(text: str) -> str:
    """What is embedded for ``text``: all of it, or its first 700 and last 300 characters."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return f"{text[:HEAD_CHARS]}\n...\n{text[-TAIL_CHARS:]}"


@dataclass(frozen=True, eq=False)
class ExampleVectors:
    """Unit vectors of labelled prompts, checked once at load."""

    vectors: npt.NDArray[np.float32]
    """(examples x dim), float32 for scoring (stored as float16)."""
    labels: npt.NDArray[np.intp]
    """Tier index of each row."""
    tiers: tuple[str, ...]
    """Tier labels from the cheapest to the largest."""
    model: str = ""
    """The embedding model the vectors came from."""
    info: str = ""
    """Provenance, as written by the tool."""

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __post_init__(self) -> None:
        v, labels = self.vectors, self.labels
        if v.ndim != 2 or v.shape[0] == 0 or labels.shape != (v.shape[0],):
            raise ValueError(f"vectors {v.shape} and labels {labels.shape} do not fit")
        if len(self.tiers) < 2 or len(set(self.tiers)) != len(self.tiers):
            raise ValueError(f"needs two or more distinct tiers, got {list(self.tiers)}")
        if labels.min() < 0 or labels.max() >= len(self.tiers):
            raise ValueError("a label is not a tier index")
        if not np.isfinite(v).all():
            raise ValueError("non-finite values")


def default_vectors_path() -> Path:
    """The shipped examples, ``gateway/tiers/data/tier_vectors.npz``."""
    return Path(str(importlib.resources.files("gateway.tiers").joinpath("data", "tier_vectors.npz")))


def write_vectors(path: str | Path, examples: ExampleVectors) -> None:
    """Write atomically (temp file + rename) so a gateway never reads half a file."""
    target = Path(path)
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        vectors=examples.vectors.astype("<f2"),
        labels=examples.labels.astype(np.uint8),
        tiers=np.asarray(examples.tiers, dtype=str),
        model=np.asarray(examples.model, dtype=str),
        info=np.asarray(examples.info, dtype=str),
    )
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(target)


def read_vectors(path: str | Path | None = None) -> ExampleVectors:
    """Read and check an examples file (``None``: the shipped one); ClassifierLoadError on any fault."""
    file = Path(path) if path is not None else default_vectors_path()
    source = repr(str(file)) if path is not None else "(shipped default)"
    try:
        with np.load(file, allow_pickle=False) as data:
            vectors = np.asarray(data["vectors"], dtype=np.float32)
            labels = np.asarray(data["labels"]).astype(np.intp)
            tiers = tuple(str(t) for t in data["tiers"].tolist())
            model = str(data["model"]) if "model" in data.files else ""
            info = str(data["info"]) if "info" in data.files else ""
    except FileNotFoundError:
        raise ClassifierLoadError(
            f"example vectors {source} do not exist; build them with "
            "`python -m tools.tiers.embed_examples build/tiers.jsonl -o FILE` or drop `path`"
        ) from None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ClassifierLoadError(f"example vectors {source} are corrupt or not an .npz: {exc}") from exc
    try:
        return ExampleVectors(vectors=vectors, labels=labels, tiers=tiers, model=model, info=info)
    except ValueError as exc:
        raise ClassifierLoadError(f"example vectors {source} are corrupt: {exc}") from exc
