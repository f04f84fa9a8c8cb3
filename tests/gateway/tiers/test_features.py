"""Hashed features: deterministic across processes, bounded, robust to odd text."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gateway.tiers.features import DENSE_NAMES, FeatureConfig, Featurizer, estimate_tokens

TEXT = "Prove that the sum of the first n odd numbers is n^2.\n- step one\n```py\nx = 1\n```"


def test_features_are_stable_across_processes() -> None:
    # Python's hash() is salted per process; the features must not be.
    code = (
        "from gateway.tiers.features import Featurizer;"
        f"f = Featurizer()({TEXT!r});"
        "print(list(map(int, f.indices)))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert outs.pop().strip() == str(list(map(int, Featurizer()(TEXT).indices)))


def test_groups_are_normalised_and_case_folded() -> None:
    f = Featurizer()
    a, b = f("Hello World hello"), f("hello world HELLO")
    assert np.array_equal(a.indices, b.indices)
    dense = np.bincount(a.indices, weights=a.values, minlength=f.config.num_buckets)
    cfg = f.config
    expected = cfg.word_weight**2 + cfg.bigram_weight**2 + len(cfg.char_ngrams) * cfg.char_weight**2
    # Groups can collide in the shared space, so the norm is only approximately the sum of weights.
    assert np.dot(dense, dense) == pytest.approx(expected, rel=0.1)


@pytest.mark.parametrize(
    "text", ["", " ", "a", "\u00e9\u00e8 \U0001f600 \u4e2d\u6587", "```", "\n\n\n", "\ud800"]
)
def test_odd_text(text: str) -> None:
    feats = Featurizer()(text)
    assert feats.dense.shape == (len(DENSE_NAMES),)
    assert np.isfinite(feats.dense).all() and np.isfinite(feats.values).all()
    assert (feats.indices >= 0).all() and (feats.indices < FeatureConfig().num_buckets).all()


def test_long_text_is_cut_but_length_is_seen() -> None:
    f = Featurizer()
    long = "word " * 50_000
    feats = f(long)
    assert len(feats.indices) < 4 * f.config.max_chars
    assert feats.dense[DENSE_NAMES.index("log_tokens")] == pytest.approx(np.log1p(estimate_tokens(len(long))))


def test_dense_structure_features() -> None:
    d = dict(zip(DENSE_NAMES, Featurizer()(TEXT).dense, strict=True))
    assert d["code_fences"] == 1
    assert d["list_items"] > 0
    assert d["math_symbols"] > 0
    assert d["question_marks"] == 0


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="power of two"):
        Featurizer(FeatureConfig(num_buckets=1000))
    with pytest.raises(ValueError, match="version"):
        Featurizer(FeatureConfig(version=99))


def test_lead_words_add_a_group_and_default_is_unchanged() -> None:
    text = "Edit the following paragraph to correct any grammatical errors: she go home"
    plain, lead = Featurizer()(text), Featurizer(FeatureConfig(lead_words=4))(text)
    assert len(lead.indices) == len(plain.indices) + 4 + 3  # 4 unigrams and 3 bigrams of the lead
    assert np.array_equal(lead.indices[: len(plain.indices)], plain.indices)


def test_request_cues_are_dense_flags() -> None:
    f = Featurizer(FeatureConfig(request_cues=True))
    assert f.dense_names[: len(DENSE_NAMES)] == DENSE_NAMES
    assert f.dense_names[len(DENSE_NAMES) :] == ("cue_small_task", "cue_large_task")
    fix = f("Fix the spelling in this note: teh cat sat on teh mat")
    cues = dict(zip(f.dense_names, fix.dense, strict=True))
    assert (cues["cue_small_task"], cues["cue_large_task"]) == (1.0, 0.0)
    assert f("Prove that 7 is prime.").dense[-2:].tolist() == [0.0, 1.0]
    assert f("Tell me about the cat that sat on the mat").dense[-2:].tolist() == [0.0, 0.0]
    assert Featurizer()("Prove that 7 is prime.").dense.shape == (len(DENSE_NAMES),)  # off by default
