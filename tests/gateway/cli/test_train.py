"""`router train`: a small run writes a model that the numpy side loads; bad data is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.train import expected_calibration_error, split_by_group, train_main
from gateway.tiers import ClassifyInput, LearnedConfig, build_classifier
from gateway.tiers.learned import LearnedModel


def _subset(tiers_jsonl: Path, out: Path, per_tier: int = 60) -> Path:
    rows = [json.loads(line) for line in tiers_jsonl.read_text().splitlines()]
    chosen: list[dict] = []
    for tier in ("small", "medium", "large"):
        chosen += [r for r in rows if r["tier"] == tier][:per_tier]
    out.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return out


def test_train_writes_a_loadable_model(
    tmp_path: Path, tiers_jsonl: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    data = _subset(tiers_jsonl, tmp_path / "data.jsonl")
    out = tmp_path / "router.bin"
    assert train_main([str(data), "-o", str(out), "--epochs", "3", "--seed", "1", "--hidden", "4"]) == 0
    printed = capsys.readouterr().out
    assert "held-out accuracy:" in printed and "ECE" in printed
    model = LearnedModel.load(out)
    assert model.tiers == ["small", "medium", "large"]
    # The rows carry corpus weights; the model records the features it was trained with.
    assert model.featurizer.config.request_cues and model.featurizer.config.lead_words == 16
    assert 0.0 <= model.metrics["holdout_accuracy"] <= 1.0
    classifier = build_classifier(LearnedConfig(path=str(out)), pools=["small", "medium", "large"])
    decision = classifier.classify(ClassifyInput(messages=[{"role": "user", "content": "hello"}]))
    assert decision.pool in ("small", "medium", "large")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "hi"}\n', "data.jsonl:1"),
        ('{"prompt": "hi", "tier": "huge"}\n', "not in tiers"),
        ("not json\n", "data.jsonl:1"),
        ("\n", "no examples"),
    ],
)
def test_bad_training_data_is_refused(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    data = tmp_path / "data.jsonl"
    data.write_text(content)
    assert train_main([str(data), "-o", str(tmp_path / "r.bin")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.bin").exists()


def test_split_keeps_groups_whole() -> None:
    import random

    from gateway.cli.train import Example

    rows = [Example(prompt=f"p{i}", tier="small", group=f"g{i % 10}") for i in range(100)]
    rest, held = split_by_group(rows, 0.2, random.Random(0))
    assert {r.group for r in rest}.isdisjoint({r.group for r in held})
    assert len(held) == 20 and len(rest) == 80


def test_expected_calibration_error() -> None:
    import numpy as np

    perfect = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert expected_calibration_error(perfect, np.array([0, 1])) == 0.0
    assert expected_calibration_error(perfect, np.array([1, 0])) == pytest.approx(1.0)
