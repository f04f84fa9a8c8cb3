"""Near-duplicate prompts, within a corpus and across corpora, by shared byte 5-grams.

Evaluation sets copy each other (HumanEval sits inside several packages; IFBench and Arena-Hard
both draw on chat logs), and a prompt seen in training and again in evaluation measures memory, not
routing. Two prompts are near-duplicates when their sets of hashed byte 5-grams (lowercased,
whitespace collapsed, first 4,000 characters) overlap by Jaccard >= ``jaccard``, or, across
corpora, when the smaller set lies mostly (>= ``containment``) inside the other (a prompt pasted
into a longer one). Byte n-grams work for every script.

Within one corpus, candidate pairs come from MinHash banding (64 hashes in 16 bands of 4), so the
cost stays linear in the corpus; every candidate is then checked exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["group_near_duplicates", "near_duplicates_of", "shingles"]

_N = 5
_MAX_CHARS = 4000
_PRIME = np.uint64(0x100000001B3)
_NUM_HASHES, _NUM_BANDS = 64, 16
_rng = np.random.default_rng(20261201)  # fixed: the same bands in every process
_A = _rng.integers(1, 2**63, _NUM_HASHES, dtype=np.uint64) | np.uint64(1)
_B = _rng.integers(0, 2**63, _NUM_HASHES, dtype=np.uint64)

Shingles = npt.NDArray[np.uint64]


def shingles(text: str) -> Shingles:
    """The sorted, distinct hashes of a prompt's byte 5-grams (lowercased, whitespace collapsed)."""
    norm = " ".join(text.lower().split())[:_MAX_CHARS].encode("utf-8", "replace")
    data = np.frombuffer(norm, dtype=np.uint8).astype(np.uint64)
    if data.size < _N:
        data = np.pad(data, (0, _N - data.size))
    m = data.size - _N + 1
    h = data[:m].copy()
    for k in range(1, _N):
        h = h * _PRIME + data[k : k + m]  # wraps mod 2**64 on purpose
    return np.unique(h)


def _similar(a: Shingles, b: Shingles, jaccard: float, containment: float) -> bool:
    shared = np.intersect1d(a, b, assume_unique=True).size
    return shared / (a.size + b.size - shared) >= jaccard or shared / min(a.size, b.size) >= containment


def near_duplicates_of(
    texts: Sequence[str], against: Sequence[str], *, jaccard: float = 0.5, containment: float = 0.8
) -> list[bool]:
    """For each of ``texts``: is it a near-duplicate of any of ``against``? Every pair is compared
    exactly: one sorted array of ``against``'s 5-grams answers each text with one ``searchsorted``."""
    ref = [shingles(t) for t in against]
    if not ref:
        return [False] * len(texts)
    sizes = np.array([r.size for r in ref])
    grams = np.concatenate(ref)
    order = np.argsort(grams, kind="stable")
    grams, owner = grams[order], np.repeat(np.arange(len(ref)), sizes)[order]
    out = []
    for text in texts:
        mine = shingles(text)
        lo, hi = np.searchsorted(grams, mine, "left"), np.searchsorted(grams, mine, "right")
        counts = hi - lo
        starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
        hits = owner[starts + np.arange(counts.sum())]
        shared = np.bincount(hits, minlength=len(ref))
        near = (shared / (mine.size + sizes - shared) >= jaccard) | (
            shared / np.minimum(mine.size, sizes) >= containment
        )
        out.append(bool(near.any()))
    return out


def _bands(s: Shingles) -> list[bytes]:
    signature = (s[None, :] * _A[:, None] + _B[:, None]).min(axis=1)
    return [band.tobytes() for band in signature.reshape(_NUM_BANDS, -1)]


def group_near_duplicates(texts: Sequence[str], *, jaccard: float = 0.5) -> list[int]:
    """A group number per text; near-duplicates (transitively) share one. A group's number is the
    index of its first text, so numbers are stable for a given order."""
    sets = [shingles(t) for t in texts]
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    buckets: dict[tuple[int, bytes], list[int]] = {}
    for i, s in enumerate(sets):
        for band_index, band in enumerate(_bands(s)):
            buckets.setdefault((band_index, band), []).append(i)
    checked: set[tuple[int, int]] = set()
    for members in buckets.values():
        for pos, i in enumerate(members):
            for j in members[:pos]:
                if (j, i) in checked:
                    continue
                checked.add((j, i))
                if _similar(sets[i], sets[j], jaccard, 1.01):  # within a corpus: Jaccard only
                    a, b = root(i), root(j)
                    parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(texts))]
