"""gateway/tiers/example_vectors.py: the examples file round-trips, a bad file is refused with a
message that says what to do, the shipped file fits, and long prompts are cut to head and tail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gateway.tiers import ClassifierLoadError
from gateway.tiers.example_vectors import (
    HEAD_CHARS,
    TAIL_CHARS,
    ExampleVectors,
    default_vectors_path,
    embedding_text,
    read_vectors,
    write_vectors,
)


def test_a_file_round_trips_as_float16(tmp_path: Path) -> None:
    vectors = np.asarray([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    written = ExampleVectors(vectors, np.asarray([0, 1, 1]), ("small", "large"), model="m", info="test")
    write_vectors(tmp_path / "v.npz", written)
    read = read_vectors(tmp_path / "v.npz")
    assert read.tiers == ("small", "large") and read.labels.tolist() == [0, 1, 1]
    assert (read.model, read.info, read.dim) == ("m", "test", 2)
    assert np.allclose(read.vectors, vectors, atol=1e-3) and read.vectors.dtype == np.float32
    assert not (tmp_path / "v.npz.tmp").exists()


def test_bad_files_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ClassifierLoadError, match="embed_examples"):
        read_vectors(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ClassifierLoadError, match="corrupt"):
        read_vectors(tmp_path / "junk.npz")
    np.savez(tmp_path / "partial.npz", vectors=np.zeros((2, 3)))
    with pytest.raises(ClassifierLoadError, match="corrupt"):
        read_vectors(tmp_path / "partial.npz")
    np.savez(
        tmp_path / "label.npz",
        vectors=np.ones((2, 3)),
        labels=np.asarray([0, 5]),
        tiers=np.asarray(["a", "b"]),
    )
    with pytest.raises(ClassifierLoadError, match="not a tier index"):
        read_vectors(tmp_path / "label.npz")
    objects = np.asarray([{"pickled": True}], dtype=object)
    np.savez(tmp_path / "pickle.npz", vectors=objects, labels=np.asarray([0]), tiers=np.asarray(["a", "b"]))
    with pytest.raises(ClassifierLoadError):  # never unpickled
        read_vectors(tmp_path / "pickle.npz")


def test_the_shipped_examples_are_minilm_vectors_of_three_tiers() -> None:
    assert default_vectors_path().stat().st_size < 4_000_000
    shipped = read_vectors()
    assert shipped.tiers == ("small", "medium", "large") and shipped.dim == 384
    assert shipped.model == "all-minilm-l6-v2"
    assert np.bincount(shipped.labels).min() >= 100
    norms = np.linalg.norm(shipped.vectors, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-2)


def test_long_prompts_keep_their_head_and_tail() -> None:
    assert embedding_text("short") == "short"
    text = "A" * HEAD_CHARS + "B" * 5000 + "Summarise the text above."
    cut = embedding_text(text)
    assert cut.startswith("A" * HEAD_CHARS) and cut.endswith("Summarise the text above.")
    assert len(cut) == HEAD_CHARS + TAIL_CHARS + len("\n...\n")
