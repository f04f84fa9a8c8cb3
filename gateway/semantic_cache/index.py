"""The in-process vector index of one tenant and pool: usearch HNSW over inner product.

Vectors are L2-normalised before they go in (and queries too), so the inner product is the cosine
similarity; usearch reports ``1 - ip`` as the distance, turned back into a similarity here. Labels
are the caller's integers. usearch marks removed vectors and skips them in searches; the index is
rebuilt from the live ones when the marked outnumber them, so a long-lived index does not grow
with its churn. usearch is imported by the first index made (~0.27 s with the tqdm it pulls in), so
a gateway that never turns the semantic cache on never pays for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

Vector = NDArray[np.float32]


def normalised(vector: Vector) -> Vector:
    """``vector`` scaled to unit length (float32); a zero vector stays zero."""
    vector = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class VectorIndex:
    """Labelled unit vectors of one dimension; ``search`` answers the nearest by cosine similarity.

    Args:
        ndim: the vectors' dimension (384 for all-MiniLM-L6-v2).
    """

    def __init__(self, ndim: int) -> None:
        self.ndim = ndim
        self._labels: set[int] = set()
        """The live labels (usearch keeps the vectors: one copy each)."""
        self._num_removed = 0
        self._index = self._new_index()

    def _new_index(self) -> Any:
        from usearch.index import Index  # lazily: see the module docstring

        return Index(ndim=self.ndim, metric="ip", dtype="f32")

    def __len__(self) -> int:
        return len(self._labels)

    def __contains__(self, label: int) -> bool:
        return label in self._labels

    def add(self, label: int, vector: Vector) -> None:
        """Index ``vector`` (normalised here) under ``label`` (new labels only)."""
        unit = normalised(vector)
        if unit.shape != (self.ndim,):
            raise ValueError(f"vector of shape {unit.shape}, index of {self.ndim} dimensions")
        self._labels.add(label)
        self._index.add(label, unit)

    def add_many(self, labels: list[int], vectors: list[Vector]) -> None:
        """Index several vectors in one call (a mirror catching up: usearch adds a batch in parallel)."""
        if not labels:
            return
        units = np.stack([normalised(v) for v in vectors])
        if units.shape[1] != self.ndim:
            raise ValueError(f"vectors of {units.shape[1]} dimensions, index of {self.ndim}")
        self._labels.update(labels)
        self._index.add(np.asarray(labels, dtype=np.uint64), units)

    def remove(self, label: int) -> None:
        if label not in self._labels:
            return
        self._labels.discard(label)
        self._index.remove(label)
        self._num_removed += 1
        if self._num_removed > max(64, len(self._labels)):  # mostly tombstones: rebuild
            old, self._index = self._index, self._new_index()
            if self._labels:
                labels = np.fromiter(self._labels, dtype=np.uint64, count=len(self._labels))
                self._index.add(labels, np.stack(old.get(labels)))
            self._num_removed = 0

    def search(self, vector: Vector, k: int = 4) -> list[tuple[int, float]]:
        """Up to ``k`` ``(label, cosine similarity)``, the most similar first."""
        if not self._labels:
            return []
        found = self._index.search(normalised(vector), min(k, len(self._labels)))
        return [
            (int(label), 1.0 - float(distance))
            for label, distance in zip(found.keys, found.distances, strict=True)
            if int(label) in self._labels
        ]
