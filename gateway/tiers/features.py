"""Text -> features for the tier classifiers: hashed n-grams plus a few structure numbers.

Everything here is numpy, deterministic across processes and machines (no salted ``hash()``),
and shared by training (``train.py``) and serving, so the two can never featurise differently.

A text becomes:

* a sparse part, ``(indices, values)`` into ``num_buckets`` hashed buckets: word unigrams, word
  bigrams and byte n-grams, each group weighted ``log1p(count)`` and L2-normalised on its own so a
  long prompt does not drown the others; indices repeat (one entry per occurrence, see
  :func:`_group`), so consumers sum values per index (``EmbeddingBag`` / ``bincount`` do);
* a dense part, :data:`DENSE_NAMES`: length and structure (log tokens, lines, code fences, digits,
  maths symbols, questions, list items, ...);
* optionally (``lead_words``, ``request_cues``; both off for models trained before they existed) the
  opening words hashed again as their own group, and the labelling guide's request cues
  (:mod:`gateway.tiers.cues`) as 0/1 dense values, so the instruction is not drowned by the text
  it applies to.

Cost is a fixed ~20 numpy calls whatever the length: words are hashed with a vectorised polynomial
hash (``np.add.reduceat`` over word segments), never a Python loop per word. Texts longer than
``max_chars`` are cut to head + tail for the sparse part (the dense length features see the whole).
"""

from __future__ import annotations

import math
import re

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.tiers.cues import CUES, request_cue

__all__ = ["DENSE_NAMES", "FeatureConfig", "Featurizer", "SparseFeatures"]

# Bump when the featurisation changes in a way that invalidates trained models.
FEATURE_VERSION = 1

DENSE_NAMES: tuple[str, ...] = (
    "log_tokens",
    "log_lines",
    "log_words",
    "mean_word_len",
    "code_fences",
    "code_chars_frac",
    "digit_frac",
    "math_symbols",
    "question_marks",
    "list_items",
    "upper_frac",
    "has_url",
)

_U64 = np.uint64
_PRIME = _U64(0x100000001B3)  # FNV-64 prime: odd, so the polynomial hash mixes every byte
_MIX = _U64(0x9E3779B97F4A7C15)  # golden-ratio constant for the final multiply-shift
_SHIFT = _U64(29)
# Seeds keep the groups apart in the shared bucket space.
_SEED_WORD = _U64(0x51ED27)
_SEED_BIGRAM = _U64(0xB16B00B5)
_SEED_CHAR = _U64(0xC4A9)
_SEED_LEAD = _U64(0x1EAD5)
_MAX_WORD_BYTES = 32  # longer "words" (base64, hashes) are hashed on their first 32 bytes

_CODE_RE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_MATH_BYTES = np.frombuffer(b"=+*/^<>%", dtype=np.uint8).astype(np.intp)
_LIST_LEAD = np.zeros(256, dtype=bool)
_LIST_LEAD[np.frombuffer(b"-*0123456789", dtype=np.uint8)] = True
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32


class FeatureConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How text is hashed; stored inside every model file so serving matches training."""

    version: int = FEATURE_VERSION
    """Featurisation version; a model trained with another version is refused at load."""
    num_buckets: int = 1 << 15
    """Size of the hashed feature space (a power of two)."""
    char_ngrams: tuple[int, ...] = (3, 5)
    """Byte n-gram lengths hashed from the lowercased UTF-8 text."""
    max_chars: int = 6000
    """Longer texts keep their first ``max_chars - tail_chars`` and last ``tail_chars`` characters."""
    tail_chars: int = 1500
    """How much of the end of a long text is kept (questions often come last)."""
    word_weight: float = 1.0
    """Scale of the word-unigram group."""
    bigram_weight: float = 0.7
    """Scale of the word-bigram group."""
    char_weight: float = 0.5
    """Scale of each byte n-gram group."""
    lead_words: int = 0
    """Words at the start of the text hashed again as their own unigram + bigram group (0: none).
    Requests usually open with the instruction ("Edit the following paragraph ..."), which the
    whole-text groups drown when a long paragraph follows. 0 is the featurisation of models
    trained before this field existed."""
    lead_weight: float = 1.0
    """Scale of the lead-words group."""
    request_cues: bool = False
    """Append the labelling guide's request cues (:mod:`gateway.tiers.cues`: a small task such as
    a grammar fix, a large one such as a proof) to the dense part, one 0/1 value each: as dense
    inputs they are standardised, so a cue seen in few training prompts still moves the model.
    False is the featurisation of models trained before this field existed."""


class SparseFeatures(msgspec.Struct, frozen=True):
    """Hashed features of one text: bucket ``indices`` with ``values`` (indices may repeat)."""

    indices: npt.NDArray[np.intp]
    values: npt.NDArray[np.float32]
    dense: npt.NDArray[np.float32]


def _mix(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    h = h * _MIX
    return h ^ (h >> _SHIFT)


def _group(
    buckets: npt.NDArray[np.uint64], num_buckets: int, weight: float
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """One group's (indices, values): per bucket ``log1p(count)``, L2-normalised, scaled by ``weight``.

    Occurrences are not deduplicated (``np.unique`` and ``flatnonzero`` cost ~4x more than the
    rest): each occurrence carries ``log1p(c) / c`` of its bucket's total, so consumers that sum
    values per index see exactly ``log1p(c)``.
    """
    if buckets.size == 0:
        return np.empty(0, np.intp), np.empty(0, np.float32)
    idx = buckets.astype(np.intp)
    counts = np.bincount(idx, minlength=num_buckets)[idx].astype(np.float32)
    logs = np.log1p(counts)
    vals = logs / counts
    # sum over buckets of log1p(c)**2; a ufunc sum, not np.dot: BLAS may wake threads (see learned.py)
    norm = float(np.sqrt((vals * logs).sum()))
    vals *= np.float32(weight / norm)
    return idx, vals.astype(np.float32, copy=False)


class Featurizer:
    """Turns text into :class:`SparseFeatures` according to a :class:`FeatureConfig`."""

    def __init__(self, config: FeatureConfig | None = None) -> None:
        self.config = config or FeatureConfig()
        if self.config.version != FEATURE_VERSION:
            raise ValueError(
                f"feature version {self.config.version} is not supported (this build: {FEATURE_VERSION})"
            )
        nb = self.config.num_buckets
        if nb <= 0 or nb & (nb - 1):
            raise ValueError(f"num_buckets must be a power of two, got {nb}")
        self._mask = _U64(nb - 1)
        self._pow = _PRIME ** np.arange(_MAX_WORD_BYTES, dtype=_U64)  # wraps mod 2**64 on purpose
        # Byte class table: word bytes are ASCII letters/digits/_ and every non-ASCII byte.
        table = np.zeros(256, dtype=bool)
        for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
            table[c] = True
        table[128:] = True
        self._is_word = table
        self.dense_names = DENSE_NAMES + (
            tuple(f"cue_{cue}" for cue in CUES) if self.config.request_cues else ()
        )
        """Names of :attr:`SparseFeatures.dense` under this config: :data:`DENSE_NAMES`, then the cues."""

    @property
    def num_dense(self) -> int:
        return len(self.dense_names)

    def __call__(self, text: str) -> SparseFeatures:
        cfg = self.config
        sparse_text = text
        if len(text) > cfg.max_chars:
            head = cfg.max_chars - cfg.tail_chars
            sparse_text = text[:head] + "\n" + text[-cfg.tail_chars :]
        raw = np.frombuffer(sparse_text.encode("utf-8", "replace"), dtype=np.uint8)
        data = _LOWER[raw]  # ASCII case folding; other bytes pass through unchanged
        nb = cfg.num_buckets
        word_hashes = self._word_hashes(data)
        groups = [
            _group(_mix(word_hashes ^ _SEED_WORD) & self._mask, nb, cfg.word_weight),
            _group(
                _mix(word_hashes[:-1] * _PRIME + word_hashes[1:] + _SEED_BIGRAM) & self._mask,
                nb,
                cfg.bigram_weight,
            ),
        ]
        groups += [
            _group(self._char_ngrams(data, n) & self._mask, nb, cfg.char_weight) for n in cfg.char_ngrams
        ]
        if cfg.lead_words > 0:
            lead = word_hashes[: cfg.lead_words]
            lead_grams = np.concatenate([lead, lead[:-1] * _PRIME + lead[1:]])
            groups.append(_group(_mix(lead_grams ^ _SEED_LEAD) & self._mask, nb, cfg.lead_weight))
        return SparseFeatures(
            indices=np.concatenate([g[0] for g in groups]),
            values=np.concatenate([g[1] for g in groups]),
            dense=self._with_cues(text, _dense(text, raw, int(word_hashes.size))),
        )

    def _with_cues(self, text: str, dense: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if not self.config.request_cues:
            return dense
        cues = np.zeros(len(CUES), np.float32)
        cue = request_cue(text)
        if cue is not None:
            cues[CUES.index(cue)] = 1.0
        return np.concatenate([dense, cues])

    def _word_hashes(self, data: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
        """One polynomial hash per word, vectorised over all words."""
        if data.size == 0:
            return np.empty(0, _U64)
        is_word = self._is_word[data]
        pos = np.flatnonzero(is_word)
        if pos.size == 0:
            return np.empty(0, _U64)
        # A word starts where a word byte follows a non-word byte (or the text start).
        starts_mask = np.empty(pos.size, dtype=bool)
        starts_mask[0] = True
        starts_mask[1:] = np.diff(pos) != 1
        starts = np.flatnonzero(starts_mask)
        word_id = np.cumsum(starts_mask) - 1
        offset = np.arange(pos.size) - starts[word_id]
        keep = offset < _MAX_WORD_BYTES
        terms = data[pos].astype(_U64) * self._pow[np.minimum(offset, _MAX_WORD_BYTES - 1)]
        terms[~keep] = 0
        return np.add.reduceat(terms, starts)

    def _char_ngrams(self, data: npt.NDArray[np.uint8], n: int) -> npt.NDArray[np.uint64]:
        """Polynomial hash of every byte n-gram (runs of whitespace included, as in the text)."""
        if data.size < n:
            return np.empty(0, _U64)
        b = data.astype(_U64)
        m = data.size - n + 1
        h = b[:m] + _U64(_SEED_CHAR + _U64(n))
        for k in range(1, n):
            h = h * _PRIME + b[k : k + m]
        return _mix(h)


def estimate_tokens(num_chars: int) -> int:
    """A cheap token estimate (~4 characters a token for English under cl100k/o200k)."""
    return (num_chars + 3) // 4


def _dense(text: str, raw: npt.NDArray[np.uint8], num_words: int) -> npt.NDArray[np.float32]:
    """Structure numbers, squashed to similar scales; counts come from one byte histogram."""
    n = len(text)
    if n == 0 or raw.size == 0:
        return np.zeros(len(DENSE_NAMES), np.float32)
    hist = np.bincount(raw, minlength=256)
    num_bytes = raw.size
    num_fences = text.count("```")
    code_chars = sum(len(m) for m in _CODE_RE.findall(text[:20000])) if num_fences else 0
    # Maths: ASCII operators plus U+2200..U+22FF (UTF-8 lead byte E2, then 88..8B).
    uni_math = int(np.count_nonzero((raw[:-1] == 0xE2) & (raw[1:] >= 0x88) & (raw[1:] <= 0x8B)))
    # List items: a line starting with "-", "*" or a digit followed by "." / ")" / space.
    line_start = raw[:-1] == 10
    list_items = int(np.count_nonzero(line_start & _LIST_LEAD[raw[1:]])) + int(_LIST_LEAD[raw[0]])
    non_space = max(1, num_bytes - int(hist[32]) - int(hist[10]) - int(hist[9]))
    return np.array(
        (
            math.log1p(estimate_tokens(n)),
            math.log1p(text.count("\n") + 1),
            math.log1p(num_words),
            min(non_space / max(1, num_words), 20.0) / 5.0,
            min(num_fences // 2, 5),
            min(code_chars / n, 1.0),
            float(hist[48:58].sum()) / num_bytes,
            math.log1p(int(hist[_MATH_BYTES].sum()) + uni_math),
            math.log1p(int(hist[63])),
            math.log1p(list_items),
            float(hist[65:91].sum()) / num_bytes,
            1.0 if "://" in text else 0.0,
        ),
        dtype=np.float32,
    )
