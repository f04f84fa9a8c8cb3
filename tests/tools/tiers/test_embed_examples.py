"""`python -m tools.tiers.embed_examples`: labelled rows become the examples file the gateway reads
(the embedder is injected here: no torch in this test)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt
import pytest

from gateway.tiers.example_vectors import HEAD_CHARS, ExampleVectors, read_vectors
from tools.tiers.embed_examples import main, neighbour_accuracy, vectors_of


def fake_embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """One deterministic unit vector per text."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).normal(size=8).astype(np.float32)
        rows.append(v / np.linalg.norm(v))
    return np.asarray(rows)


def test_rows_become_labelled_vectors() -> None:
    examples = vectors_of([("hi", "small"), ("prove it", "large"), ("sum up", "medium")], embed=fake_embed)
    assert examples.labels.tolist() == [0, 2, 1] and examples.tiers == ("small", "medium", "large")
    assert np.allclose(examples.vectors[1], fake_embed(["prove it"])[0])
    with pytest.raises(ValueError, match="huge"):
        vectors_of([("x", "huge")], embed=fake_embed)


def test_the_command_writes_the_file_from_a_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"prompt": "hello", "tier": "small"}, {"prompt": "x" * 3 * HEAD_CHARS, "tier": "large"}]
    corpus = tmp_path / "tiers.jsonl"
    corpus.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in rows))
    seen: list[str] = []

    def recording(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        seen.extend(texts)
        return fake_embed(texts)

    assert main(["--corpus", str(corpus), "-o", str(tmp_path / "v.npz")], embed=recording) == 0
    written = read_vectors(tmp_path / "v.npz")
    assert written.labels.tolist() == [0, 2] and written.dim == 8
    assert "tiers.jsonl sha256" in written.info
    assert seen[0] == "hello" and len(seen[1]) < 3 * HEAD_CHARS  # cut as the gateway cuts requests
    out = capsys.readouterr().out
    assert "1 small, 0 medium, 1 large: 2 prompts" in out and "k=5" not in out  # k must be < rows


def test_neighbour_accuracy_leaves_out_the_whole_group() -> None:
    vectors = np.asarray([[1, 0], [1, 0], [0.99, 0.14], [0, 1], [0.14, 0.99]], dtype=np.float32)
    examples = ExampleVectors(vectors, np.asarray([0, 0, 0, 2, 2]), ("small", "medium", "large"))
    assert neighbour_accuracy(examples, ["a", "a", "b", "c", "d"], k=1) == 1.0
    # the two large examples share a group: each sees only small ones, so both miss
    assert neighbour_accuracy(examples, ["a", "a", "b", "c", "c"], k=1) == pytest.approx(3 / 5)
