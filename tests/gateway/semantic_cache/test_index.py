"""gateway/semantic_cache/index.py: usearch over inner product of unit vectors is cosine similarity."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.semantic_cache.index import VectorIndex, normalised


def unit(*values: float) -> np.ndarray:
    return normalised(np.array(values, dtype=np.float32))


def test_search_answers_cosine_similarity_most_similar_first() -> None:
    index = VectorIndex(3)
    index.add(1, np.array([2.0, 0.0, 0.0], dtype=np.float32))  # normalised on the way in
    index.add(2, np.array([1.0, 1.0, 0.0], dtype=np.float32))
    index.add(3, np.array([0.0, 0.0, 5.0], dtype=np.float32))
    found = index.search(np.array([3.0, 0.0, 0.0], dtype=np.float32), k=2)
    assert [label for label, _ in found] == [1, 2]
    assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert found[1][1] == pytest.approx(1 / np.sqrt(2), abs=1e-5)


def test_removed_labels_are_never_answered_and_rebuilds_keep_the_rest() -> None:
    index = VectorIndex(2)
    for label in range(200):
        index.add(label, unit(1.0, label / 200))
    for label in range(150):  # more tombstones than live vectors: the index is rebuilt
        index.remove(label)
    assert len(index) == 50 and 10 not in index and 199 in index
    found = index.search(unit(1.0, 0.0), k=8)
    assert found and all(label >= 150 for label, _ in found)
    assert found[0][0] == 150


def test_empty_index_and_wrong_dimensions() -> None:
    index = VectorIndex(4)
    assert index.search(unit(1, 0, 0, 0)) == []
    with pytest.raises(ValueError, match="4 dimensions"):
        index.add(1, unit(1, 0))
